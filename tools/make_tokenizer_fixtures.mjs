// Writes tests/data/gpt2_tokenizer_golden.json: GPT-2 token ids from tiktoken 1.0.22 (the Rust core
// compiled to wasm, encoding "gpt2") for hand-written adversarial strings, seeded pseudo-random
// strings, and Brown corpus text. Run through tools/make_tokenizer_fixtures.sh, which fetches tiktoken.
//
//   node tools/make_tokenizer_fixtures.mjs TIKTOKEN_DIR BROWN_TXT OUT_JSON
//
// Every case is encoded with allowed_special "all", so "<|endoftext|>" becomes 50256. The output is
// deterministic: a fixed PRNG seed, no dependence on time, locale or hash order.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [tiktokenDir, brownPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node make_tokenizer_fixtures.mjs TIKTOKEN_DIR BROWN_TXT OUT_JSON");
  process.exit(2);
}
const require = createRequire(import.meta.url);
const tiktoken = require(path.resolve(tiktokenDir, "tiktoken.cjs"));
const version = JSON.parse(fs.readFileSync(path.join(tiktokenDir, "package.json"), "utf8")).version;
const enc = tiktoken.get_encoding("gpt2");

// ---------------------------------------------------------------------------------------------
// Hand-written cases. Comments name what each group is after.
const S = String.fromCodePoint;
const hand = [
  // empty and trivial
  "", " ", "a", " a", "a ", "  a", "Hello world", "Hello, world!", "hello\nworld",
  // contractions: the regex alternatives are lower-case only, so upper/mixed case splits differently
  "don't", "DON'T", "Don'T", "dOn't", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "she'll",
  "SHE'LL", "he'd", "HE'D", "it's", "IT'S", "can't", "won't", "y'all", "Y'ALL", "'s", "'s'", "''",
  "'''", "' s", "I'm'll", "I'll've", "'ll've'd", "rock'n'roll", "o'clock", "'twas", "'re'", "x's's",
  "'", " '", "' ", "'S", "'sa", "'tis", "'d've", "'m'm'm",
  // apostrophe variants: not ASCII ', so no contraction split
  "don\u2019t", "it\u2019s", "I\u2018m", "don\u02bct", "don\u0060t", "don\u00b4t", "\u2019s",
  // digits and numbers
  "0", "7", "42", "2024", "1234567890", "12345678901234567890123456789012345678901234567890",
  "3.14", "3.14159265358979", "1,000", "1,000,000", "-17", "+1 (555) 010-9999", "1e-9", "0x1F",
  "v1.2.3", "10%", "$5.99", "\u00a35", "\u20ac12,50", "2nd 3rd 4th", "a1b2c3", "1a2b3c", "  123",
  " 1 2 3 ", "\u0663\u0664\u0665", "\uff11\uff12\uff13", "\u0967\u0968\u0969",
  // other numbers: Roman numerals (Nl), superscripts/subscripts/fractions (No), letterlike
  "\u216b", "Chapter \u216b", "\u2160\u2161\u2162\u2163", "x\u00b2 + y\u00b2 = z\u00b2", "H\u2082O",
  "\u00bd cup", "\u2153\u2154", "\u2460\u2461\u2462", "10\u00b3", "x\u00b2y", "\u2116 5", "\u2122",
  // accents, precomposed and combining (combining marks are \p{M}, not \p{L})
  "caf\u00e9", "cafe\u0301", "Caf\u00e9 cre\u0300me bru\u0302le\u0301e", "na\u00efve", "nai\u0308ve",
  "\u00c5ngstr\u00f6m", "A\u030angstro\u0308m", "se\u0301ance", "\u0301", " \u0301", "a\u0301\u0301\u0301",
  "\u1ec7", "e\u0323\u0302", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334a\u0360l\u0337g\u0315o",
  "\u00df \u1e9e", "\u0131 \u0130", "\ufb01 \ufb02", "\u01c5", "\u02b0\u02b1", "\u00aa\u00ba",
  // CJK, kana, Hangul
  "\u4f60\u597d\u4e16\u754c", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
  "\u3053\u3093\u306b\u3061\u306f", "\u30ab\u30bf\u30ab\u30ca\u30fc", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
  "\u1100\u1161\u11a8", "\u4e00 \u4e8c \u4e09", S(0x20000) + S(0x2a6d6), "\u3001\u3002\u300c\u300d",
  // Arabic, Hebrew (with marks), Devanagari with combining vowel signs and virama, Thai, Tamil
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
  "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
  "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
  "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f", "\u0915\u093e\u0901", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
  "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u0413\u043e\u0441\u0443\u0434\u0430\u0440\u0441\u0442\u0432\u043e", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1",
  // emoji: single, skin tone, ZWJ families, flags (regional indicator pairs), keycaps, VS16
  S(0x1f600), S(0x1f600) + S(0x1f601) + S(0x1f602), "I " + S(0x2764, 0xfe0f) + " NY",
  S(0x1f44d, 0x1f3fd), S(0x1f468, 0x200d, 0x1f469, 0x200d, 0x1f467, 0x200d, 0x1f466),
  S(0x1f469, 0x1f3fe, 0x200d, 0x1f4bb), S(0x1f3f3, 0xfe0f, 0x200d, 0x1f308),
  S(0x1f1fa, 0x1f1f8), S(0x1f1ef, 0x1f1f5, 0x1f1e9, 0x1f1ea), "flag: " + S(0x1f1eb, 0x1f1f7) + "!",
  S(0x1f3f4, 0xe0067, 0xe0062, 0xe0073, 0xe0063, 0xe0074, 0xe007f), "1\ufe0f\u20e3", "#\ufe0f\u20e3",
  "\u263a", "\u263a\ufe0f", "\u263a\ufe0e", "hi" + S(0x1f44b) + "there", " " + S(0x1f680) + " ",
  S(0x1f9d1, 0x200d, 0x1f91d, 0x200d, 0x1f9d1), "\u200d", "a\u200db",
  // whitespace: runs of spaces, tabs and newlines in every combination, at start, end and middle
  "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\n", "\n\t", " \t", "\t ",
  "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a\nb", "a\n\nb", "a \nb", "a\n b",
  "a \n b", "a  \n  b", "a\r\nb", "a\r\n\r\nb", "a \r\n b", "a\n\n\n\n\nb", "   leading", "trailing   ",
  "   both   ", "\tlead tab", "trail tab\t", "\nlead newline", "trail newline\n", "trail two\n\n",
  " \t \n \r\n  x", "x \t \n \r\n  ", "\n\n\n", "  \n  \n  ", "\t\t\t", " \t\t ", "a \t\n\r b",
  "line one\nline two\n\nline four\n", "a b  c   d    e     f", "    indented code",
  "a" + " ".repeat(40) + "b", " ".repeat(100), "\n".repeat(30), "\t".repeat(17) + "x",
  // other Unicode whitespace (all \s in the regex) and look-alikes that are not \s
  "a\u000bb", "a\u000cb", "a\u0085b", "a\u00a0b", "a\u00a0\u00a0b", "\u00a0lead", "trail\u00a0",
  "a\u1680b", "a\u2000b", "a\u2002\u2003b", "a\u2009b", "a\u200ab", "a\u2028b", "a\u2029b",
  "a\u202fb", "a\u205fb", "a\u3000b", "\u3000\u3000\u3000", "\u4f60\u3000\u597d", "a\u200bb",
  "\u200b", "a\ufeffb", "\ufeffBOM at start", "a\u2060b", "a\u180eb", "a\u001cb\u001dc\u001ed\u001ff",
  " \u00a0 ", "\u00a0 x", " \u00a0x", "x \u00a0", "\u2028\u2029", "\u000b\u000c\u0085",
  "a\u0000b", "\u0001\u0002\u0003", "a\u007fb", "\u0080\u009f", "tab\u0009vt\u000bff\u000ccr\u000dnl\u000a",
  // punctuation runs, with and without a leading space
  "...", "!!!", "?!", "a...b", "a ... b", "(a)", "[[x]]", "{}", "--", "---", "\u2014", "a\u2014b",
  "\u201cquoted\u201d", "\u00abguillemets\u00bb", "``quoted''", " ``", "@#$%^&*", " @#$%", "\u00bf\u00a1",
  // code snippets
  "int main() { return 0; }", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "def f(x):\n    return x ** 2\n", "if (a != b && c >= d) x->y = *p++;", "const s = `${a}`;",
  "#include <stdio.h>", "<div class=\"x\">hi</div>", "SELECT * FROM t WHERE id=1;", "a_b_c __init__",
  "x+=1;y-=2", "std::vector<int>", "// comment\n/* block */", "\"json\": {\"k\": [1, 2.5, null]}",
  // URLs, e-mail, paths
  "https://example.com/path?q=1&r=two#frag", "http://www.\u4f8b\u3048.jp/", "mailto:someone@example.org",
  "C:\\Users\\name\\file.txt", "/usr/local/bin/", "user@host:~$ ls -la",
  // the special token, alone, inside text, repeated, and near-misses
  "<|endoftext|>", "a<|endoftext|>b", "Hello<|endoftext|>", "<|endoftext|>Hello", " <|endoftext|> ",
  "<|endoftext|><|endoftext|>", "\n<|endoftext|>\n", "<|endoftext|", "|endoftext|>", "<|ENDOFTEXT|>",
  "<| endoftext |>", "<|endoftext|>'s", "<<|endoftext|>>",
  // long repeated words and long single tokens
  "hello ".repeat(50), "the".repeat(40), "a".repeat(120), " the".repeat(60),
  "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "=".repeat(64), "-".repeat(80), "ab".repeat(50), "\u00e9".repeat(30), "\u4f60".repeat(25),
  S(0x1f600).repeat(10),
  // mixtures
  "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "MiXeD CaSe TeXt",
  "naïve café 123 ½ — “quotes” 🙂 done", "Price: 1,234.56€ (approx. $1.3k)", "e.g. i.e. etc.",
  "Hello\u00a0world\u2009!", "It's 3 o'clock\u2014time to go!", "\u0410 \u0431 \u0412",
  "mixed\u4e2d\u6587English", "\u0645\u0631\u062d\u0628\u0627123abc", "abc\u0301123\u0301",
];

// ---------------------------------------------------------------------------------------------
// Seeded pseudo-random strings: sfc32-style generator from a fixed seed (no Math.random).
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(0x6a7f2e11);
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = (arr) => arr[Math.floor(rand() * arr.length)];
const range = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);

// Each class yields an array of code points (one "unit"; a unit may be several code points).
const cps = (s) => Array.from(s, (c) => c.codePointAt(0));
const classes = [
  // [weight, generator]
  [14, () => [pick(range(0x61, 0x7a))]],                       // a-z
  [5, () => [pick(range(0x41, 0x5a))]],                        // A-Z
  [12, () => [0x20]],                                           // space
  [4, () => Array(randInt(2, 5)).fill(0x20)],                   // space run
  [3, () => [pick([0x09, 0x0a, 0x0d])]],                        // tab, LF, CR
  [2, () => cps("\r\n")],
  [3, () => [pick([0x0b, 0x0c, 0x85, 0xa0, 0x1680, 0x2000, 0x2003, 0x2009, 0x200a, 0x2028, 0x2029,
                   0x202f, 0x205f, 0x3000, 0x1c, 0x1f])]],      // other \s (and 0x1c/0x1f: Python-only isspace)
  [2, () => [pick([0x200b, 0xfeff, 0x200d, 0x2060, 0x180e, 0x00ad])]], // zero-width, not \s
  [6, () => [pick(range(0x30, 0x39))]],                         // 0-9
  [1, () => [pick([0x0663, 0x0967, 0xff11, 0x216b, 0x2160, 0xb2, 0xb3, 0xb9, 0xbd, 0x2153, 0x2460, 0x2082])]],
  [4, () => [0x27]],                                            // apostrophe
  [4, () => cps(pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL", "'D", "'Ve"]))],
  [1, () => [pick([0x2019, 0x2018, 0x02bc, 0x60, 0xb4])]],      // apostrophe look-alikes
  [6, () => [pick(cps("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~"))]],  // ASCII punctuation (no ')
  [1, () => [pick([0x2014, 0x2013, 0x201c, 0x201d, 0xab, 0xbb, 0xbf, 0xa1, 0x2026, 0x20ac, 0xa3, 0xa7])]],
  [3, () => [pick([0xe9, 0xe8, 0xf1, 0xfc, 0xf6, 0xe5, 0xdf, 0xe7, 0xc9, 0xd1, 0x1ec7, 0x0131, 0x130, 0x1c5])]],
  [3, () => [pick(cps("aeiouAEn")), pick([0x301, 0x300, 0x302, 0x308, 0x323, 0x30a, 0x327, 0x303])]],
  [1, () => [pick([0x301, 0x308, 0x20e3, 0xfe0f, 0x36f])]],     // a lone combining mark
  [3, () => [randInt(0x4e00, 0x9fa5)]],                         // CJK ideographs
  [1, () => [pick([randInt(0x3041, 0x3096), randInt(0x30a1, 0x30fa), randInt(0xac00, 0xd7a3), 0x3001, 0x3002, 0xff0c])]],
  [2, () => [pick(range(0x0621, 0x064a).concat([0x064e, 0x0650, 0x0651]))]], // Arabic letters + harakat
  [2, () => [pick(range(0x0915, 0x0939).concat([0x093e, 0x093f, 0x0940, 0x0947, 0x094d, 0x0901, 0x0902]))]], // Devanagari
  [1, () => [pick(range(0x0410, 0x044f).concat(range(0x0391, 0x03c9).filter((c) => c !== 0x03a2)))]], // Cyrillic, Greek
  [2, () => [pick([0x1f600, 0x1f602, 0x1f44d, 0x1f680, 0x2764, 0x263a, 0x1f9d1, 0x1f308, 0x1f4a9])]],
  [1, () => [pick([0x1f44d, 0x1f44b, 0x1f9d1]), pick([0x1f3fb, 0x1f3fd, 0x1f3ff])]],           // skin tone
  [1, () => [pick([0x1f468, 0x1f469]), 0x200d, pick([0x1f469, 0x1f467, 0x1f4bb, 0x1f52c])]], // ZWJ
  [1, () => [0x1f1e6 + randInt(0, 25), 0x1f1e6 + randInt(0, 25)]],                          // flag pair
  [1, () => cps(pick(["<|endoftext|>", "<|endoftext|>", "<|", "|>", "endoftext"]))],
];
const totalWeight = classes.reduce((s, [w]) => s + w, 0);
function randomUnit() {
  let r = rand() * totalWeight;
  for (const [w, gen] of classes) {
    if ((r -= w) < 0) return gen();
    }
  return classes[classes.length - 1][1]();
}
const random = [];
for (let i = 0; i < 300; i++) {
  const len = randInt(1, 60);
  let out = [];
  while (out.length < len) out = out.concat(randomUnit());
  random.push(String.fromCodePoint(...out.slice(0, len)));
}

// ---------------------------------------------------------------------------------------------
// Brown corpus: the first 50 non-empty lines, and one 2000-character span that keeps its newlines.
const brown = fs.readFileSync(brownPath, "utf8");
const brownLines = brown.split("\n").filter((l) => l.trim() !== "").slice(0, 50);
const spanStart = brown.indexOf("\n", 1000000) + 1;
const brownSpan = brown.slice(spanStart, spanStart + 2000);

// ---------------------------------------------------------------------------------------------
const texts = [...hand, ...random, ...brownLines, brownSpan];
for (const t of texts) {
  if (/\p{Cs}/u.test(t)) throw new Error("lone surrogate in case: " + JSON.stringify(t));
}
const cases = texts.map((text) => ({ text, ids: Array.from(enc.encode(text, "all")) }));
enc.free();

// Serialise one case per line; invisible and whitespace-like characters are written as \u escapes
// (astral ones as surrogate pairs) so the file diffs and reads well, everything else as UTF-8.
function quote(s) {
  return JSON.stringify(s).replace(/[\p{Cc}\p{Cf}\p{Z}\p{Co}\p{Cn}\p{M}]/gu, (c) => {
    if (c === " ") return c;
    let r = "";
    for (let i = 0; i < c.length; i++) r += "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0");
    return r;
  });
}
const lines = cases.map((c) => `    {"text": ${quote(c.text)}, "ids": [${c.ids.join(", ")}]}`);
const generator =
  `tools/make_tokenizer_fixtures.sh: tiktoken ${version} (npm, wasm) get_encoding("gpt2"), ` +
  `encode(text, allowed_special="all"); ${hand.length} hand-written, ${random.length} seeded random, ` +
  `${brownLines.length} Brown lines, 1 Brown span of 2000 chars`;
const json = `{"generator": ${JSON.stringify(generator)},\n  "cases": [\n${lines.join(",\n")}\n  ]}\n`;
JSON.parse(json); // sanity: round-trips
{
  const back = JSON.parse(json).cases;
  for (let i = 0; i < back.length; i++) {
    if (back[i].text !== cases[i].text) throw new Error("escape round-trip failed at case " + i);
  }
}
fs.writeFileSync(outPath, json);
const tokens = cases.reduce((s, c) => s + c.ids.length, 0);
console.log(`wrote ${outPath}: ${cases.length} cases, ${tokens} tokens, ${json.length} chars`);

// Writes tests/data/hf_tokenizers/NAME.json for every data/tokenizers/NAME/tokenizer.json: token ids and
// decoded text from Hugging Face's tokenizers 0.23.2 (its Rust core as a node binding, npm "tokenizers")
// for hand-written adversarial strings, the file's own added tokens written in text, seeded random strings
// and Brown corpus lines; and decodes of seeded random id lists. Run through
// tools/make_hf_tokenizer_fixtures.sh, which fetches the binding and the tokenizers.
//
//   node tools/make_hf_tokenizer_fixtures.mjs BINDING_DIR TOKENIZERS_DIR BROWN_TXT OUT_DIR
//
// Each case: text; ids = encode(text, null, {addSpecialTokens: false}); with_special = the same with
// addSpecialTokens: true; decoded = decode(with_special, false); decoded_skip = decode(with_special, true).
// Deterministic: a fixed PRNG seed, no dependence on time, locale or hash order.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [bindingDir, tokenizersDir, brownPath, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node make_hf_tokenizer_fixtures.mjs BINDING_DIR TOKENIZERS_DIR BROWN_TXT OUT_DIR");
  process.exit(2);
}
const require = createRequire(import.meta.url);
const hf = require(path.resolve(bindingDir, "index.js"));
const version = JSON.parse(fs.readFileSync(path.join(bindingDir, "package.json"), "utf8")).version;

const S = String.fromCodePoint;
// Hand-written cases, one concern per group.
const hand = [
  // empty and trivial
  "", " ", "a", " a", "a ", "  a", "Hello world", "Hello, world!", "hello\nworld", "Hello", "hello", "HELLO",
  // contractions and case
  "don't", "DON'T", "Don'T", "I'm", "I'M", "you're", "we've", "she'll", "he'd", "it's", "IT'S", "can't",
  "y'all", "'s", "''", "' s", "rock'n'roll", "'twas", "don\u2019t", "it\u2019s", "'\u017f", "'K", "'\u212a",
  "MiXeD CaSe TeXt", "camelCaseWord", "XMLHttpRequest", "\u01c5ungla", "\u0130stanbul", "ΟΔΥΣΣΕΥΣ",
  // digits and long numbers
  "0", "7", "42", "2024", "1234567890", "12345678901234567890123456789012345678901234567890", "3.14159",
  "1,000,000", "-17", "+1 (555) 010-9999", "1e-9", "0x1F", "v1.2.3", "10%", "$5.99", "\u20ac12,50",
  "a1b2c3", "  123", " 1 2 3 ", "\u0663\u0664\u0665", "\uff11\uff12\uff13", "\u0967\u0968\u0969", "\u216b",
  "x\u00b2 + y\u00b2", "H\u2082O", "\u00bd cup", "\u2460\u2461",
  // accents and combining marks
  "caf\u00e9", "cafe\u0301", "Caf\u00e9 cre\u0300me bru\u0302le\u0301e", "na\u00efve", "\u00c5ngstr\u00f6m",
  "\u0301", " \u0301", "a\u0301\u0301\u0301", "\u1ec7", "e\u0323\u0302", "Z\u0351\u036b\u0343\u036a\u0302a\u0360l\u0337g\u0315o",
  "\u00df \u1e9e", "\ufb01 \ufb02", "\u2126 \u212b \u00b5",
  // scripts: CJK, kana, Hangul (precomposed and jamo), Arabic, Hebrew, Devanagari, Thai, Tamil, Cyrillic, Greek
  "\u4f60\u597d\u4e16\u754c", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
  "\u3053\u3093\u306b\u3061\u306f", "\u30ab\u30bf\u30ab\u30ca\u30fc", "\uff76\uff80\uff76\uff85", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
  "\u1100\u1161\u11a8", S(0x20000) + S(0x2a6d6), "\u3001\u3002\u300c\u300d", "\u4e00 \u4e8c \u4e09",
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629",
  "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
  "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
  "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u0413\u043e\u0441\u0443\u0434\u0430\u0440\u0441\u0442\u0432\u043e", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1",
  "mixed\u4e2d\u6587English", "\u0645\u0631\u062d\u0628\u0627123abc",
  // emoji: single, skin tone, ZWJ, flags, keycaps, variation selectors
  S(0x1f600), S(0x1f600) + S(0x1f601) + S(0x1f602), "I " + S(0x2764, 0xfe0f) + " NY", S(0x1f44d, 0x1f3fd),
  S(0x1f468, 0x200d, 0x1f469, 0x200d, 0x1f467, 0x200d, 0x1f466), S(0x1f3f3, 0xfe0f, 0x200d, 0x1f308),
  S(0x1f1fa, 0x1f1f8), "flag: " + S(0x1f1eb, 0x1f1f7) + "!", S(0x1f3f4, 0xe0067, 0xe0062, 0xe0073, 0xe0063, 0xe0074, 0xe007f),
  "1\ufe0f\u20e3", "\u263a\ufe0f", "hi" + S(0x1f44b) + "there", " " + S(0x1f680) + " ", "\u200d", "a\u200db",
  // whitespace runs: spaces, tabs, newlines, at the start, the end and inside
  "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\n", "a  b", "a   b", "a\tb", "a\t\tb", "a \tb",
  "a\nb", "a\n\nb", "a \nb", "a\n b", "a  \n  b", "a\r\nb", "a\n\n\n\n\nb", "   leading", "trailing   ", "   both   ",
  "\tlead tab", "trail tab\t", "\nlead newline", "trail newline\n", " \t \n \r\n  x", "x \t \n \r\n  ",
  "line one\nline two\n\nline four\n", "a b  c   d    e     f", "    indented code", "a" + " ".repeat(40) + "b",
  " ".repeat(33), "\n".repeat(12), "\t".repeat(9) + "x",
  // other Unicode spaces and invisible characters
  "a\u000bb", "a\u000cb", "a\u0085b", "a\u00a0b", "\u00a0lead", "a\u1680b", "a\u2002\u2003b", "a\u2009b", "a\u2028b",
  "a\u202fb", "a\u3000b", "\u3000\u3000", "a\u200bb", "\u200b", "a\ufeffb", "\ufeffBOM", "a\u2060b", "a\u180eb",
  "a\u001cb\u001dc", "a\u0000b", "\u0001\u0002", "a\u007fb", "\u0080\u009f", "a\u00adb", "\ufffd", "a\ufffdb",
  S(0xe000) + S(0xf8ff), S(0x10ffff), "\ufdd0\uffff", S(0x1d400, 0x1d41a), "\uff21\uff22\uff43",
  // punctuation
  "...", "!!!", "?!", "a...b", "a ... b", "(a)", "[[x]]", "{}", "--", "---", "\u2014", "a\u2014b", "\u201cquoted\u201d",
  "\u00abguillemets\u00bb", "@#$%^&*", " @#$%", "\u00bf\u00a1", "\u2026", "!\n", "?\n\n", ".\r\n",
  // code
  "int main() { return 0; }", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "def f(x):\n    return x ** 2\n",
  "if (a != b && c >= d) x->y = *p++;", "const s = `${a}`;", "#include <stdio.h>", "<div class=\"x\">hi</div>",
  "SELECT * FROM t WHERE id=1;", "a_b_c __init__", "std::vector<int>", "// comment\n/* block */",
  "\"json\": {\"k\": [1, 2.5, null]}", "x = [1,2,3]\nprint(x[::-1])", "    if x:\n        pass\n",
  // URLs, e-mail, paths
  "https://example.com/path?q=1&r=two#frag", "http://www.\u4f8b\u3048.jp/", "mailto:someone@example.org",
  "C:\\Users\\name\\file.txt", "/usr/local/bin/", "user@host:~$ ls -la",
  // special-token look-alikes every family should leave alone
  "<s>", "</s>", "<unk>", "<pad>", "[CLS]", "[SEP]", "<|endoftext|>", "<|endoftext|", "<|ENDOFTEXT|>", "<<|endoftext|>>",
  "<bos>", "<eos>", "<mask>", "[MASK]", "\u2581", "\u2581\u2581a", "a\u2581b", "<0x41>", "<0x0A>", "\u0120\u010a",
  // long repeats
  "hello ".repeat(20), "a".repeat(120), " the".repeat(30), "=".repeat(64), "ab".repeat(40), "\u00e9".repeat(30),
  "\u4f60".repeat(25), S(0x1f600).repeat(8), "1".repeat(40),
  // mixtures
  "The quick brown fox jumps over the lazy dog.", "naïve café 123 ½ — “quotes” 🙂 done", "e.g. i.e. etc.",
  "Price: 1,234.56€ (approx. $1.3k)", "It's 3 o'clock\u2014time to go!", "Hello\u00a0world\u2009!",
];

// Seeded pseudo-random strings (mulberry32; no Math.random).
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
const pieces = [
  "a", "Z", "q", "é", "ß", "Ж", "中", "文", "ا", "न", "ि", "ก", "한", "0", "7", "42", "²", " ", " ", "  ", "\n", "\t",
  "\r\n", "\u00a0", "\u3000", "'", "'s", "'LL", "’", ".", ",", "!", "-", "$", "😀", "👩‍💻", "🇫🇷", "<", "|", ">",
  "\u200b", "\u0301", "\u2581", "the", " the", "ing", "##", "_", "{", "}",
];
function randomStrings(seed, count, specials) {
  const rand = mulberry32(seed);
  const all = pieces.concat(specials);
  const out = [];
  for (let i = 0; i < count; i++) {
    const n = 1 + Math.floor(rand() * 24);
    let s = "";
    for (let k = 0; k < n; k++) s += all[Math.floor(rand() * all.length)];
    out.push(s);
  }
  return out;
}

const brown = fs.readFileSync(brownPath, "utf8").split("\n").filter((l) => l.trim() !== "");
const brownLines = brown.slice(1000, 1040);

function quote(s) {
  return JSON.stringify(s).replace(/[\p{Cc}\p{Cf}\p{Z}\p{Co}\p{Cn}\p{M}]/gu, (c) => {
    if (c === " ") return c;
    let r = "";
    for (let i = 0; i < c.length; i++) r += "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0");
    return r;
  });
}

// One golden file: the cases and decodes of `tok`, whose tokenizer.json is `json`; `extra` goes in the
// file's header (a variant's base and patch).
async function writeGolden(name, json, tok, seed, outPath, extra) {
  // The file's added tokens written in text: alone, between words, with spaces around (lstrip/rstrip,
  // Metaspace after a special token), doubled, and cut short.
  const added = json.added_tokens.map((t) => t.content);
  const chosen = [...added.slice(0, 4), ...added.slice(-2), ...added.filter((t) => !json.added_tokens.find((a) => a.content === t).special).slice(0, 4)];
  const specialCases = [];
  for (const t of [...new Set(chosen)]) {
    specialCases.push(t, `a${t}b`, ` ${t} `, `Hello ${t}world`, `${t}Hello`, `${t}${t}`, `  ${t}\n`, t.slice(0, -1), t.toUpperCase(), `x ${t.toLowerCase()}y`);
  }
  const texts = [...new Set([...hand, ...specialCases, ...randomStrings(0x5eed + seed, 60, chosen.slice(0, 4)), ...brownLines])];
  const cases = [];
  for (const text of texts) {
    const plain = await tok.encode(text, null, { addSpecialTokens: false });
    const full = await tok.encode(text, null, { addSpecialTokens: true });
    const withSpecial = full.getIds();
    cases.push({ text, ids: plain.getIds(), with_special: withSpecial, decoded: await tok.decode(withSpecial, false),
                 decoded_skip: await tok.decode(withSpecial, true) });
  }
  // Decodes of random ids: byte tokens that do not form UTF-8, special tokens between others.
  const rand = mulberry32(0xdec0de + seed);
  const vocabSize = tok.getVocabSize(true);
  const addedIds = json.added_tokens.map((t) => t.id);
  const decodes = [];
  for (let i = 0; i < 40; i++) {
    const n = 1 + Math.floor(rand() * 12);
    const ids = [];
    for (let k = 0; k < n; k++) {
      const r = rand();
      ids.push(r < 0.15 && addedIds.length ? addedIds[Math.floor(rand() * Math.min(addedIds.length, 8))]
             : r < 0.5 ? Math.floor(rand() * 600) : Math.floor(rand() * vocabSize));
    }
    const known = ids.filter((id) => tok.idToToken(id) !== null);
    decodes.push({ ids: known, decoded: await tok.decode(known, false), decoded_skip: await tok.decode(known, true) });
  }
  const lines = cases.map((c) => `    {"text": ${quote(c.text)}, "ids": [${c.ids.join(", ")}], "with_special": [${c.with_special.join(", ")}], ` +
                                 `"decoded": ${quote(c.decoded)}, "decoded_skip": ${quote(c.decoded_skip)}}`);
  const decodeLines = decodes.map((d) => `    {"ids": [${d.ids.join(", ")}], "decoded": ${quote(d.decoded)}, "decoded_skip": ${quote(d.decoded_skip)}}`);
  const generator = `tools/make_hf_tokenizer_fixtures.sh: Hugging Face tokenizers ${version} (npm, node binding), ` +
    `${extra ? "Tokenizer.fromString(the base with the patch below)" : `Tokenizer.fromFile("data/tokenizers/${name}/tokenizer.json")`}; ` +
    `${hand.length} hand-written, ${specialCases.length} with added tokens, 60 seeded random, ${brownLines.length} Brown lines ` +
    `(duplicates dropped); ${decodes.length} random id lists`;
  const header = extra ? `  "base": ${JSON.stringify(extra.base)},\n  "patch": ${JSON.stringify(extra.patch)},\n` : "";
  const out = `{"generator": ${JSON.stringify(generator)},\n${header}  "vocab_size": ${vocabSize},\n  "cases": [\n${lines.join(",\n")}\n  ],\n` +
              `  "decodes": [\n${decodeLines.join(",\n")}\n  ]}\n`;
  const back = JSON.parse(out);
  back.cases.forEach((c, i) => { if (c.text !== cases[i].text || c.decoded !== cases[i].decoded) throw new Error(`${name}: escape round trip failed at ${i}`); });
  fs.writeFileSync(outPath, out);
  console.log(`wrote ${outPath}: ${cases.length} cases, ${decodes.length} decodes, ${out.length} chars`);
}

const names = fs.readdirSync(tokenizersDir).filter((n) => fs.existsSync(path.join(tokenizersDir, n, "tokenizer.json"))).sort();
fs.mkdirSync(outDir, { recursive: true });
for (const name of names) {
  const file = path.join(tokenizersDir, name, "tokenizer.json");
  const json = JSON.parse(fs.readFileSync(file, "utf8"));
  await writeGolden(name, json, hf.Tokenizer.fromFile(file), names.indexOf(name), path.join(outDir, `${name}.json`));
}

// ---------------------------------------------------------------------------------------------
// Variants: the real vocabularies behind other pipelines, for the components no real file above uses
// (Metaspace with prepend_scheme first, Whitespace, Digits, Punctuation, RobertaProcessing, lstrip/rstrip/
// single_word/normalized added tokens, CTC, ...), and a T5-style Unigram (Precompiled charsmap,
// WhitespaceSplit + Metaspace, "$A </s>") built from tests/data/spm/unigram_nfkc.model as Hugging Face's
// converter writes T5. Each golden file carries its base and patch (top-level fields replaced; a
// {"type": "Precompiled"} without a map gets the .model's); tests/test_hf_tokenizers.cpp builds the same.
const variants = JSON.parse(fs.readFileSync(new URL("./hf_tokenizer_variants.json", import.meta.url), "utf8"));

// A SentencePiece ModelProto: pieces (1: piece, 2: score, 3: type), trainer_spec 35 byte_fallback,
// normalizer_spec 2 precompiled_charsmap.
function readModel(bytes) {
  function* fields(buf) {
    let i = 0;
    const varint = () => { let v = 0, shift = 0, b; do { b = buf[i++]; v += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80); return v; };
    while (i < buf.length) {
      const key = varint(), field = Math.floor(key / 8), wire = key & 7;
      if (wire === 0) yield [field, varint()];
      else if (wire === 2) { const n = varint(); yield [field, buf.subarray(i, i + n)]; i += n; }
      else if (wire === 5) { yield [field, buf.readFloatLE(i)]; i += 4; }
      else if (wire === 1) { i += 8; }
      else throw new Error("wire type " + wire);
    }
  }
  const m = { pieces: [], byteFallback: false, charsmap: Buffer.alloc(0) };
  for (const [f, v] of fields(bytes)) {
    if (f === 1) {
      const p = { piece: "", score: 0, type: 1 };
      for (const [g, w] of fields(v)) { if (g === 1) p.piece = w.toString("utf8"); else if (g === 2) p.score = w; else if (g === 3) p.type = w; }
      m.pieces.push(p);
    } else if (f === 2) { for (const [g, w] of fields(v)) if (g === 35) m.byteFallback = w !== 0; }
    else if (f === 3) { for (const [g, w] of fields(v)) if (g === 2) m.charsmap = Buffer.from(w); }
  }
  return m;
}

function baseJson(base) {
  if (!base.startsWith("spm:")) return JSON.parse(fs.readFileSync(path.join(tokenizersDir, base, "tokenizer.json"), "utf8"));
  const m = readModel(fs.readFileSync(new URL(`../tests/data/spm/${base.slice(4)}`, import.meta.url)));
  const added = [];
  m.pieces.forEach((p, id) => {
    if (p.type === 2 || p.type === 3 || p.type === 4)
      added.push({ id, content: p.piece, single_word: false, lstrip: false, rstrip: false, normalized: false, special: p.type !== 4 });
  });
  return { version: "1.0", truncation: null, padding: null, added_tokens: added,
           normalizer: { type: "Precompiled", precompiled_charsmap: m.charsmap.toString("base64") },
           pre_tokenizer: null, post_processor: null, decoder: null,
           model: { type: "Unigram", unk_id: m.pieces.findIndex((p) => p.type === 2), vocab: m.pieces.map((p) => [p.piece, p.score]),
                    byte_fallback: m.byteFallback } };
}

function applyPatch(json, patch) {
  const charsmap = json.normalizer && json.normalizer.type === "Precompiled" ? json.normalizer.precompiled_charsmap : null;
  const fill = (v) => {
    if (Array.isArray(v)) return v.map(fill);
    if (v && typeof v === "object") {
      const o = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]));
      if (o.type === "Precompiled" && !("precompiled_charsmap" in o)) o.precompiled_charsmap = charsmap;
      return o;
    }
    return v;
  };
  return { ...json, ...fill(patch) };
}

fs.mkdirSync(path.join(outDir, "variants"), { recursive: true });
for (const [name, v] of Object.entries(variants)) {
  const json = applyPatch(baseJson(v.base), v.patch);
  await writeGolden(name, json, hf.Tokenizer.fromString(JSON.stringify(json)), 100 + Object.keys(variants).indexOf(name),
                    path.join(outDir, "variants", `${name}.json`), v);
}

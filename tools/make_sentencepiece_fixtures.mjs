// Writes tests/data/spm_golden.json: for each SentencePiece model made by
// tools/make_sentencepiece_fixtures.sh, the ids and pieces spm_encode gives for ~90 lines, and the
// normalised text the model sees (spm_normalize --use_internal_normalization: the model's own
// NormalizerSpec, so with the dummy prefix and U+2581 for spaces).
//
//   node tools/make_sentencepiece_fixtures.mjs MODEL_DIR BROWN_TXT OUT_JSON NAME=OPTIONS...
//
// spm_encode reads one sentence per line, so no case holds "\n" or "\r". Consecutive unknown
// characters come back as one <unk> id with the merged surface as its piece (SentencePiece merges
// them); with byte fallback they come back as <0xNN> pieces instead. The helper checks that the
// pieces spell the normalised text and that ids and pieces line up.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [modelDir, brownPath, outPath, ...modelArgs] = process.argv.slice(2);
if (!modelArgs.length) {
  console.error("usage: node make_sentencepiece_fixtures.mjs MODEL_DIR BROWN_TXT OUT_JSON NAME=OPTIONS...");
  process.exit(2);
}

const S = String.fromCodePoint;
const hand = [
  // empty, whitespace only, and whitespace placement (spaces and tabs; no newlines)
  "", " ", "   ", "\t", "Hello world", "hello  world", "a   b    c", "  leading spaces",
  "trailing spaces  ", "  both ends  ", "\tleading tab", "tab\tinside", "trailing tab\t",
  "mixed \t tabs\t \tand spaces", "word", " word", "word ",
  // NFKC: full-width forms, ideographic space, half-width katakana, ligatures, compatibility chars
  "ＡＢＣ１２３", "Ｈｅｌｌｏ\u3000ｗｏｒｌｄ！", "\u3000ideographic space\u3000", "ｶﾀｶﾅ", "ﬁnd the ﬂow",
  "ﬃ ﬄ ﬀ", "①②③", "x² + y³", "½ cup", "™ ℃ № ㎏", "Ⅻ", "wait…", "ǅ Ǆ ǆ", "ﬁ",
  // accents precomposed and combining, lone and stacked combining marks
  "café", "cafe\u0301", "naïve résumé", "Ångström", "A\u030angstro\u0308m", "São Paulo Zürich",
  "e\u0301\u0301", "\u0301 lone mark", "Z\u0351\u036b\u0343a\u0360l\u0337g\u0315o",
  // other spaces and invisible characters
  "a\u00a0b", "a\u2009b", "a\u200bb", "\ufeffBOM", "soft\u00adhyphen", "a\u0007b", "x\u202fy",
  // the meta symbol itself in the input
  "a\u2581b", "\u2581\u2581", "\u2581start",
  // emoji, flags, ZWJ sequences (unknown: byte fallback or <unk>)
  "I \u2764\ufe0f NY", S(0x1f600), S(0x1f468, 0x200d, 0x1f469, 0x200d, 0x1f467), S(0x1f1fa, 0x1f1f8) + " flag",
  "smile " + S(0x1f642) + S(0x1f642) + " twice",
  // scripts outside the training data
  "日本語のテキスト", "中文 and English", "한국어", "مرحبا بالعالم", "नमस्ते दुनिया", "Καλημέρα", "Привет, мир",
  "שָׁלוֹם", "สวัสดี",
  // user-defined symbols <sep>, <cls> (only in unigram_nfkc), control and reserved pieces as text
  "a<sep>b", "<sep>", "<cls> start", "x <sep> y <cls> z", "<sep><sep><cls>", "<se p>", "<SEP>", "<sep",
  "<s> and </s>", "<unk>", "<0x41>", "<pad>",
  // digits and punctuation
  "1234567890", "3.14159", "1,000,000", "phone: 555-0199", "``quoted'' , he said .", "Hello, world!",
  "(parenthesized) [bracketed] {braced}", "don't DON'T", "e-mail co-operate", "$5.99 & 10%",
  // code, URLs, mixed case, long words
  "int main() { return 0; }", "x_1 = y**2 // comment", "https://example.com/a?b=c#d",
  "The QUICK brown FOX jumps", "supercalifragilisticexpialidocious", "the the the the the the",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  // indentation and runs of spaces (whitespace-only pieces in bpe_spaces)
  "    return x", "        return x  # two  spaces", "def f(x):", "a  b", "a    b", "  x", "x  ",
];

// Brown lines: the first 8 non-empty lines (inside the training text) and 8 from past 3 MB (outside).
const brown = fs.readFileSync(brownPath, "utf8");
const nonEmpty = (s) => s.split("\n").filter((l) => l.trim() !== "");
const brownLines = [
  ...nonEmpty(brown).slice(0, 8),
  ...nonEmpty(brown.slice(brown.indexOf("\n", 3000000) + 1)).slice(0, 8),
];
const texts = [...hand, ...brownLines];
for (const t of texts) {
  if (/[\r\n]/.test(t)) throw new Error("case holds a line break: " + JSON.stringify(t));
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "spm-fixtures-"));
const input = path.join(tmp, "cases.txt");
fs.writeFileSync(input, texts.join("\n") + "\n");
const run = (cmd, args) => {
  const out = execFileSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "pipe"] });
  const lines = out.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  if (lines.length !== texts.length) throw new Error(`${cmd} gave ${lines.length} lines for ${texts.length}`);
  return lines;
};

// Pieces to bytes: <0xNN> is one byte, anything else its UTF-8.
function spell(pieces) {
  const bytes = [];
  for (const p of pieces) {
    const m = /^<0x([0-9A-F]{2})>$/.exec(p);
    if (m) bytes.push(parseInt(m[1], 16));
    else bytes.push(...Buffer.from(p, "utf8"));
  }
  return Buffer.from(bytes).toString("utf8");
}

const version = execFileSync("spm_encode", ["--version"], { encoding: "utf8" }).trim();
const models = [];
for (const arg of modelArgs) {
  const eq = arg.indexOf("=");
  const name = arg.slice(0, eq), options = arg.slice(eq + 1);
  const file = `${name}.model`;
  const model = path.join(modelDir, file);
  const ids = run("spm_encode", [`--model=${model}`, "--output_format=id", `--input=${input}`]);
  const pieces = run("spm_encode", [`--model=${model}`, "--output_format=piece", `--input=${input}`]);
  const normalized = run("spm_normalize", [`--model=${model}`, "--use_internal_normalization=true", `--input=${input}`]);
  const vocab = fs.readFileSync(path.join(modelDir, `${name}.vocab`), "utf8").split("\n").filter((l) => l !== "");
  const cases = texts.map((text, i) => {
    const c = {
      text,
      ids: ids[i] === "" ? [] : ids[i].split(" ").map(Number),
      pieces: pieces[i] === "" ? [] : pieces[i].split(" "),
      normalized: normalized[i],
    };
    if (c.ids.length !== c.pieces.length) throw new Error(`${file}: ids and pieces differ in count for ${JSON.stringify(text)}`);
    if (spell(c.pieces) !== c.normalized) {
      throw new Error(`${file}: pieces ${JSON.stringify(c.pieces)} do not spell ${JSON.stringify(c.normalized)}`);
    }
    c.ids.forEach((id, k) => {
      if (!(id >= 0 && id < vocab.length)) throw new Error(`${file}: id ${id} out of range`);
      const vp = vocab[id].split("\t")[0];
      if (vp !== c.pieces[k] && id !== 0) throw new Error(`${file}: id ${id} is ${vp}, piece says ${c.pieces[k]}`);
    });
    return c;
  });
  models.push({ file, vocab_size: vocab.length, spm_train_options: options, cases });
}
fs.rmSync(tmp, { recursive: true });

// One case per line; invisible characters and combining marks as \u escapes for readable diffs.
function quote(s) {
  return JSON.stringify(s).replace(/[\p{Cc}\p{Cf}\p{Z}\p{Co}\p{Cn}\p{M}]/gu, (c) => {
    if (c === " ") return c;
    let r = "";
    for (let i = 0; i < c.length; i++) r += "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0");
    return r;
  });
}
const generator =
  `tools/make_sentencepiece_fixtures.sh: ${version} (Debian) spm_train, spm_encode --output_format=id|piece, ` +
  `spm_normalize --use_internal_normalization=true; models trained on the first 300 KB of data/brown.txt`;
let json = `{"generator": ${JSON.stringify(generator)},\n "models": [\n`;
json += models.map((m) => {
  const cases = m.cases.map((c) =>
    `    {"text": ${quote(c.text)}, "ids": [${c.ids.join(", ")}], "pieces": [${c.pieces.map(quote).join(", ")}], ` +
    `"normalized": ${quote(c.normalized)}}`);
  return `  {"file": ${JSON.stringify(m.file)}, "vocab_size": ${m.vocab_size}, ` +
    `"spm_train_options": ${JSON.stringify(m.spm_train_options)},\n   "cases": [\n${cases.join(",\n")}\n   ]}`;
}).join(",\n");
json += "\n ]}\n";
const back = JSON.parse(json);
back.models.forEach((m, i) => m.cases.forEach((c, k) => {
  if (c.text !== models[i].cases[k].text || c.normalized !== models[i].cases[k].normalized) {
    throw new Error("escape round-trip failed");
  }
}));
fs.writeFileSync(outPath, json);
console.log(`wrote ${outPath}: ${models.length} models x ${texts.length} cases, ${json.length} chars`);

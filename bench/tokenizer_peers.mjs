// GPT-2 tokenizer peers for the tokenizer benchmark: tiktoken 1.0.22 (OpenAI's Rust core as wasm) and
// gpt-3-encoder 1.1.4 (plain JavaScript, a port of GPT-2's encoder.py). Node runs each on one thread.
// Prints one line of JSON per peer. Run through bench/tokenizer_peers.sh.
//
//   node bench/tokenizer_peers.mjs --peer tiktoken [--ids-out ids.u32] [--repeats 3] [FILE]
//   node bench/tokenizer_peers.mjs --peer gpt-3-encoder [--prefix-bytes 200000] [--repeats 3]
//                                  [--line-repeats 3] [FILE]
//
// FILE defaults to data/brown.txt. Ordinary text only: special tokens are not recognised (Brown has
// none). Times cover encoding a string already in memory, best of --repeats; MB/s is 10^6 bytes of
// UTF-8 input per second. --ids-out writes the tiktoken ids as little-endian uint32, for a C++
// benchmark to compare against. For gpt-3-encoder each repeat loads a fresh copy of the module, so its
// per-word memo cache starts empty every time, and its ids are checked against tiktoken's on the
// same prefix. Its one encode() call on the whole prefix is slowed by an O(tokens^2) array concat, so
// it is also timed line by line (by_line_*), which shows the speed of its BPE itself.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);

const opts = { peer: "tiktoken", idsOut: null, repeats: 3, lineRepeats: 3, prefixBytes: 200000, file: null };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const next = () => {
    if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
    return argv[++i];
  };
  if (a === "--peer") opts.peer = next();
  else if (a === "--ids-out") opts.idsOut = next();
  else if (a === "--repeats") opts.repeats = Math.max(1, parseInt(next(), 10));
  else if (a === "--line-repeats") opts.lineRepeats = Math.max(1, parseInt(next(), 10));
  else if (a === "--prefix-bytes") opts.prefixBytes = parseInt(next(), 10);
  else if (a.startsWith("--")) throw new Error(`unknown option ${a}`);
  else opts.file = a;
}
const file = opts.file ?? path.join(root, "data/brown.txt");
const tiktokenDir = path.join(root, "data/npm/tiktoken");
const gpt3Dir = path.join(root, "data/npm/gpt-3-encoder");

const now = () => Number(process.hrtime.bigint()) / 1e9;
const round = (x, d) => Math.round(x * 10 ** d) / 10 ** d;

function loadTiktoken() {
  const t0 = now();
  const tiktoken = require(path.join(tiktokenDir, "tiktoken.cjs"));
  const version = JSON.parse(fs.readFileSync(path.join(tiktokenDir, "package.json"), "utf8")).version;
  const enc = tiktoken.get_encoding("gpt2");
  return { enc, version, loadS: now() - t0 };
}

// Best-of-n wall time of fn(); returns [seconds, result of the last call].
function best(n, fn) {
  let bestS = Infinity, result;
  for (let r = 0; r < n; r++) {
    const t0 = now();
    result = fn();
    bestS = Math.min(bestS, now() - t0);
  }
  return [bestS, result];
}

function writeU32LE(p, ids) {
  const buf = Buffer.alloc(ids.length * 4);
  for (let i = 0; i < ids.length; i++) buf.writeUInt32LE(ids[i], i * 4);
  fs.writeFileSync(p, buf);
}

const bytes = fs.readFileSync(file);
const text = bytes.toString("utf8");

if (opts.peer === "tiktoken") {
  const { enc, version, loadS } = loadTiktoken();
  const [s, ids] = best(opts.repeats, () => enc.encode_ordinary(text));
  if (opts.idsOut) writeU32LE(opts.idsOut, ids);
  console.log(JSON.stringify({
    tokenizer: `tiktoken-${version}-wasm`, encoding: "gpt2", threads: 1, file: path.relative(root, file) || file,
    bytes: bytes.length, tokens: ids.length, repeats: opts.repeats, best_s: round(s, 4),
    mb_per_s: round(bytes.length / 1e6 / s, 2), load_s: round(loadS, 3),
    ...(opts.idsOut ? { ids_out: opts.idsOut } : {}),
  }));
  enc.free();
} else if (opts.peer === "gpt-3-encoder") {
  // The prefix ends at the last newline within --prefix-bytes so no word is cut.
  let end = Math.min(opts.prefixBytes, bytes.length);
  const nl = bytes.lastIndexOf(0x0a, end - 1);
  if (nl > 0 && end < bytes.length) end = nl + 1;
  const prefix = bytes.subarray(0, end).toString("utf8");
  const modulePath = path.join(gpt3Dir, "Encoder.js");
  const version = JSON.parse(fs.readFileSync(path.join(gpt3Dir, "package.json"), "utf8")).version;
  let bestS = Infinity, ids, loadS = 0;
  for (let r = 0; r < opts.repeats; r++) {
    delete require.cache[require.resolve(modulePath)];
    const t0 = now();
    const g = require(modulePath); // reads encoder.json + vocab.bpe; a fresh, empty BPE cache
    loadS = now() - t0;
    const t1 = now();
    ids = g.encode(prefix);
    bestS = Math.min(bestS, now() - t1);
  }
  // Also line by line (each line with its newline, a fresh module per repeat): this avoids the
  // quadratic output concatenation, so it shows the BPE speed itself. Its ids differ from the
  // whole-string ids where blank lines meet ("\n\n" is one token when encoded whole).
  const lines = prefix.split(/(?<=\n)/);
  let lineS = Infinity;
  for (let r = 0; r < opts.lineRepeats; r++) {
    delete require.cache[require.resolve(modulePath)];
    const g = require(modulePath);
    const t1 = now();
    for (const l of lines) g.encode(l);
    lineS = Math.min(lineS, now() - t1);
  }
  const { enc } = loadTiktoken();
  const ref = enc.encode_ordinary(prefix);
  enc.free();
  let firstDiff = -1;
  for (let i = 0; i < Math.max(ref.length, ids.length); i++) {
    if (ref[i] !== ids[i]) { firstDiff = i; break; }
  }
  console.log(JSON.stringify({
    tokenizer: `gpt-3-encoder-${version}-js`, encoding: "gpt2", threads: 1, file: path.relative(root, file) || file,
    bytes: end, tokens: ids.length, repeats: opts.repeats, best_s: round(bestS, 4),
    mb_per_s: round(end / 1e6 / bestS, 3), load_s: round(loadS, 3),
    by_line_best_s: round(lineS, 4), by_line_mb_per_s: round(end / 1e6 / lineS, 3),
    ids_match_tiktoken: firstDiff < 0, ...(firstDiff >= 0 ? { first_mismatch: firstDiff } : {}),
  }));
} else {
  throw new Error(`unknown --peer ${opts.peer} (tiktoken, gpt-3-encoder)`);
}

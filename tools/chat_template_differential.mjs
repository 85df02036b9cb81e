// Random templates rendered by Attend (`attend chat-template`) and by @huggingface/jinja, compared: a
// differential check beside the goldens. Two kinds: "expressions" (operators, filters, tests, methods on a
// few values) and "statements" (if/for/set/namespace/generation with white space and "-" control around
// them). Prints the counts and the cases that differ; expressions where only the oracle fails are the
// extensions Attend takes from Python's Jinja (docs/FORMATS.md lists them).
//
//   TZ=UTC node tools/chat_template_differential.mjs JINJA_DIR ATTEND_BINARY expressions|statements SEED COUNT
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [jinjaDir, attend, kind, seedArg, countArg] = process.argv.slice(2);
if (!countArg || !["expressions", "statements"].includes(kind)) {
  console.error("usage: node chat_template_differential.mjs JINJA_DIR ATTEND_BINARY expressions|statements SEED COUNT");
  process.exit(2);
}
const { Template } = await import(path.resolve(jinjaDir, "dist/index.js"));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "attend-jinja-"));
let seed = Number(seedArg);
const rnd = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
const pick = (a) => a[Math.floor(rnd() * a.length)];

// Renders with Attend; the error line instead when it fails.
function attendRender(src, messages, extra, agp) {
  fs.writeFileSync(path.join(tmp, "t.jinja"), src);
  fs.writeFileSync(path.join(tmp, "m.json"), JSON.stringify(messages));
  const args = ["chat-template", "--template", path.join(tmp, "t.jinja"), "--messages", path.join(tmp, "m.json"), "--extra", JSON.stringify(extra)];
  if (agp) args.push("--add-generation-prompt");
  try {
    return { out: execFileSync(attend, args, { stdio: ["ignore", "pipe", "pipe"] }).toString() };
  } catch (e) {
    return { err: e.stderr.toString().trim() };
  }
}
function oracleRender(src, context) {
  try {
    return { out: new Template(src).render(context) };
  } catch (e) {
    return { err: e.message };
  }
}

// ---- expressions
const atoms = ["1", "0", "-3", "2.5", "2.0", "'a'", "''", "'Hello World'", "' x '", "true", "false", "none", "[1, 2, 3]", "[]", "['b', 'a']",
  "{'k': 1, 'j': 'v'}", "{}", "m", "m.role", "m.content", "msgs", "msgs[0]", "msgs[-1].content", "undefined_x", "(1, 2)", "'a\\nb'", "3", "'é😀'", "[1.5, none]", "msgs | length"];
const binops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in", "**"];
const filters = ["length", "upper", "lower", "trim", "first", "last", "reverse", "sort", "unique", "join", "join(',')", "tojson", "tojson(indent=2)", "string", "int", "float", "abs", "list", "items", "default('d')", "title", "capitalize", "indent(2)", "replace('a', 'b')", "map(attribute='role')", "selectattr('role', 'equalto', 'user')", "dictsort", "safe"];
const tests = ["defined", "undefined", "none", "string", "number", "integer", "mapping", "iterable", "sequence", "boolean", "true", "false", "odd", "even", "lower", "upper", "callable"];
const methods = [".upper()", ".lower()", ".strip()", ".split()", ".split(' ')", ".startswith('H')", ".endswith('d')", ".replace('l', 'L')", ".title()", ".items()", ".keys()", ".values()", ".get('k')", ".get('x', 5)", "[0]", "[1:]", "[::-1]", "[-1]", ".length"];
function expr(d) {
  const r = rnd();
  if (d > 2 || r < 0.3) return pick(atoms);
  if (r < 0.5) return `${expr(d + 1)} ${pick(binops)} ${expr(d + 1)}`;
  if (r < 0.65) return `${expr(d + 1)} | ${pick(filters)}`;
  if (r < 0.75) return `${expr(d + 1)} is ${rnd() < 0.3 ? "not " : ""}${pick(tests)}`;
  if (r < 0.85) return `(${expr(d + 1)})${pick(methods)}`;
  if (r < 0.92) return `${expr(d + 1)} if ${expr(d + 1)} else ${expr(d + 1)}`;
  return `not ${expr(d + 1)}`;
}

// ---- statements
const ws = () => pick(["", "", " ", "\n", "\n  ", "  \n", "\n\n", "\t", " \n "]);
const dash = () => (rnd() < 0.3 ? "-" : "");
const open = (k) => `{%${dash()} ${k} ${dash()}%}`;
const conds = ["loop.first", "loop.last", "m.role == 'user'", "ns.n > 1", "m.content", "not loop.first and m.role != 'system'", "x is defined", "add_generation_prompt"];
const outs = ["m.role", "m.content | trim", "loop.index", "ns.n", "x", "'<|im_start|>' + m.role + '\\n'", "m.content ~ '!'", "loop.length", "[m.role] | tojson"];
function block(d) {
  let s = "";
  const n = 1 + Math.floor(rnd() * 3);
  for (let i = 0; i < n; i++) {
    s += ws();
    const r = rnd();
    if (d > 2 || r < 0.3) s += `{{${dash()} ${pick(outs)} ${dash()}}}`;
    else if (r < 0.4) s += pick(["text", "A B", "<x>", "{#c#}", `{#${dash()} c ${dash()}#}`]);
    else if (r < 0.6) s += `${open("if " + pick(conds))}${block(d + 1)}${rnd() < 0.5 ? open("else") + block(d + 1) : ""}${open("endif")}`;
    else if (r < 0.75) s += `${open("for m in messages" + (rnd() < 0.2 ? " if m.content" : ""))}${block(d + 1)}${open("endfor")}`;
    else if (r < 0.85) s += `${open("set ns.n = ns.n + 1")}`;
    else if (r < 0.92) s += `${open("set x = " + pick(outs))}`;
    else s += `${open("generation")}${block(d + 1)}${open("endgeneration")}`;
    s += ws();
  }
  return s;
}

const messages = [{ role: "system", content: " Be kind. " }, { role: "user", content: "Hello World" }, { role: "assistant", content: "Yo" }];
const counts = { agree: 0, both_fail: 0, differ: 0, only_oracle_fails: 0, only_attend_fails: 0 };
const report = [];
for (let i = 0; i < Number(countArg); i++) {
  const agp = rnd() < 0.5;
  const src = kind === "expressions" ? `{% set m = msgs[1] %}{{ ${expr(0)} }}` : `{% set ns = namespace(n=0) %}{% set m = messages[0] %}${block(0)}${rnd() < 0.3 ? "\n" : ""}`;
  const extra = { msgs: messages };
  const o = oracleRender(src, { messages, tools: null, documents: null, add_generation_prompt: agp, ...extra });
  const a = attendRender(src, messages, extra, agp);
  if (o.err && a.err) counts.both_fail++;
  else if (o.err) (counts.only_oracle_fails++, report.push(["only the oracle fails", src, o.err, a.out]));
  else if (a.err) (counts.only_attend_fails++, report.push(["only Attend fails", src, o.out, a.err]));
  else if (o.out === a.out) counts.agree++;
  else (counts.differ++, report.push(["differ", src, o.out, a.out]));
}
console.log(counts);
for (const r of report) console.log(JSON.stringify(r));
fs.rmSync(tmp, { recursive: true });

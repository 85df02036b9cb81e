// Soak of attend serve: many short streamed requests from concurrent clients, a fifth of them abandoned mid-stream
// (the client aborts after its first tokens). Afterwards: no request of the others failed, the server still
// answers, the KV blocks in use are back to 0, and its resident memory (from /proc, by --pid) did not grow past
// its level after the first few hundred requests.
//
//   node bench/serve_soak.mjs --url http://127.0.0.1:8080 --pid PID [--requests 2000] [--clients 8] [--max-tokens 32]
const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => {
  if (a.startsWith("--")) pairs.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : "1"]);
  return pairs;
}, []));
import fs from "node:fs";
const url = args.url ?? "http://127.0.0.1:8080";
const total = Number(args.requests ?? 2000), clients = Number(args.clients ?? 8), maxTokens = Number(args["max-tokens"] ?? 32);
const rss = () => args.pid ? Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${args.pid}/status`, "utf8"))[1]) / 1024 : NaN;
const metric = async (name) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(await (await fetch(`${url}/metrics`)).text())[1]);

let next = 0, done = 0, abandoned = 0, failures = [];
const rssAt = [];
async function client() {
  while (next < total) {
    const i = next++;
    const abandon = i % 5 === 4;
    const controller = new AbortController();
    try {
      const res = await fetch(`${url}/v1/completions`, {
        method: "POST", signal: controller.signal, headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt: `request ${i}: the story of the ${i % 97} cats`, max_tokens: maxTokens,
                               temperature: 0.8, seed: i, stream: true, ignore_eos: true }),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      let chunks = 0, finished = false;
      for await (const bytes of res.body) {
        const text = new TextDecoder().decode(bytes);
        chunks += (text.match(/^data: /gm) || []).length;
        if (text.includes("data: [DONE]")) finished = true;
        if (abandon && chunks >= 3) {
          controller.abort();
          abandoned++;
          break;
        }
      }
      if (!abandon && !finished) throw new Error("the stream ended without [DONE]");
    } catch (e) {
      if (!(abandon && e.name === "AbortError")) failures.push(`request ${i}: ${e.message}`);
    }
    if (++done % 200 === 0) {
      rssAt.push([done, rss()]);
      console.log(`${done} requests, ${abandoned} abandoned, ${failures.length} failed, RSS ${rssAt.at(-1)[1].toFixed(1)} MB`);
    }
  }
}
const started = performance.now();
await Promise.all(Array.from({ length: clients }, client));
let used = Infinity;
for (let i = 0; i < 100 && used > 0; i++) {
  used = await metric("attend_kv_blocks_in_use");
  if (used > 0) await new Promise((r) => setTimeout(r, 50));
}
const health = await fetch(`${url}/health`);
console.log(`soak: ${total} requests in ${((performance.now() - started) / 1000).toFixed(1)} s, ${abandoned} abandoned, ` +
            `${failures.length} failed; /health ${health.status}; KV blocks in use ${used}; RSS after 400 requests ` +
            `${rssAt[1]?.[1].toFixed(1)} MB, at the end ${rssAt.at(-1)?.[1].toFixed(1)} MB`);
for (const f of failures.slice(0, 10)) console.log(`  ${f}`);
process.exit(failures.length === 0 && health.status === 200 && used === 0 ? 0 : 1);

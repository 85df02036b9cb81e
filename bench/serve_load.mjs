// Load on an OpenAI-compatible server (attend serve, llama-server): streamed completions from N concurrent
// clients, for N in a list; per level the aggregate generation rate, time to first token and inter-token latency
// percentiles. Then, with --prefix, the first-token time of a request whose long prompt start is cached against
// one whose is not. Plain fetch and server-sent events, so that both servers are measured the same way.
//
//   node bench/serve_load.mjs --url http://127.0.0.1:8080 [--levels 1,2,4,8,16] [--requests 2] [--max-tokens 128]
//                             [--temperature 0] [--prefix 512] [--json out.json]
//
// Each client sends --requests requests one after another (each a different prompt, ignore_eos, so that every one
// runs its whole budget; greedy, or sampled at --temperature, whose default in OpenAI's API is 1). The rate counts
// generated tokens (the usage the server reports at the end of a stream, or else the streamed chunks with text)
// over the level's wall time; the latencies are between chunks with text.
const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => {
  if (a.startsWith("--")) pairs.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : "1"]);
  return pairs;
}, []));
const url = args.url ?? "http://127.0.0.1:8080";
const levels = (args.levels ?? "1,2,4,8,16").split(",").map(Number);
const perClient = Number(args.requests ?? 2);
const maxTokens = Number(args["max-tokens"] ?? 128);
const prefix = Number(args.prefix ?? 0);
const temperature = Number(args.temperature ?? 0);

const words = "the of and to a in that is was he for it with as his on be at by i this had not are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people".split(" ");
// A prompt of about n words, different for each seed.
function prompt(seed, n) {
  let x = seed * 2654435761 % 4294967296, out = [];
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
  }
  return out.join(" ");
}

const percentile = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))];
};

// One streamed completion: the times of its tokens.
async function stream(text, maxTokens) {
  const start = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: text, max_tokens: maxTokens, temperature, stream: true, ignore_eos: true,
                           stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  const decoder = new TextDecoder();
  let buffer = "";
  let generated;  // the server's own count (usage), where it sends one
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.usage?.completion_tokens !== undefined) generated = chunk.usage.completion_tokens;
      const c = chunk.choices && chunk.choices[0];
      const t = c ? (c.text ?? c.delta?.content ?? "") : "";
      if (t) times.push(performance.now());
    }
  }
  return { start, times, generated: generated ?? times.length };
}

async function level(n, seedBase) {
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: n }, async (_, client) => {
    const mine = [];
    for (let r = 0; r < perClient; r++) mine.push(await stream(prompt(seedBase + client * 1000 + r, 24), maxTokens));
    return mine;
  }));
  const wall = (performance.now() - started) / 1000;
  const flat = results.flat();
  const tokens = flat.reduce((s, r) => s + r.generated, 0);
  const ttft = flat.map((r) => (r.times[0] - r.start) / 1000);
  const itl = flat.flatMap((r) => r.times.slice(1).map((t, i) => (t - r.times[i]) / 1000));
  return { streams: n, requests: flat.length, tokens, seconds: wall, tokens_per_s: tokens / wall,
           ttft_p50: percentile(ttft, 50), ttft_p99: percentile(ttft, 99), itl_p50: percentile(itl, 50),
           itl_p99: percentile(itl, 99) };
}

const report = { url, max_tokens: maxTokens, temperature, requests_per_client: perClient, levels: [] };
await stream(prompt(1, 24), 8);  // warm up
for (const n of levels) {
  const r = await level(n, 7919 * n);
  report.levels.push(r);
  console.log(`${String(n).padStart(2)} streams: ${r.tokens_per_s.toFixed(1)} tokens/s (${r.tokens} in ${r.seconds.toFixed(2)} s); ` +
              `first token p50 ${(r.ttft_p50 * 1000).toFixed(0)} ms, p99 ${(r.ttft_p99 * 1000).toFixed(0)} ms; ` +
              `between tokens p50 ${(r.itl_p50 * 1000).toFixed(1)} ms, p99 ${(r.itl_p99 * 1000).toFixed(1)} ms`);
}
if (prefix > 0) {
  // The same long start twice, each time with its own end: the second finds the start in the prefix cache.
  const start = prompt(424242, prefix);
  const cold = await stream(`${start} first ending`, 4);
  const warm = await stream(`${start} second ending`, 4);
  report.prefix = { words: prefix, cold_ttft: (cold.times[0] - cold.start) / 1000, warm_ttft: (warm.times[0] - warm.start) / 1000 };
  console.log(`prefix of ${prefix} words: first token after ${(report.prefix.cold_ttft * 1000).toFixed(0)} ms uncached, ` +
              `${(report.prefix.warm_ttft * 1000).toFixed(0)} ms cached (${(100 * report.prefix.warm_ttft / report.prefix.cold_ttft).toFixed(1)}%)`);
}
if (args.json) (await import("node:fs")).writeFileSync(args.json, JSON.stringify(report, null, 2) + "\n");

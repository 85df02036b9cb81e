// `attend serve` against OpenAI's official JavaScript client (npm openai, fetched by scripts/get-data.sh into
// data/npm/openai): completions, chat, streaming and embeddings; many streams at once, each equal to its run alone;
// and bad input (malformed JSON, wrong types, an unknown model, a prompt past the context, a huge body, a slow
// client, a disconnect mid-stream, a wrong or missing API key), each a clear 4xx while the server keeps serving.
//
//   node tests/serve/openai_client.mjs ATTEND_BINARY MODEL_DIR OPENAI_PACKAGE_DIR
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const [attend, model, openaiDir] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const { OpenAI } = require(openaiDir);
const KEY = "test-key";

// Starts a server on a free port and waits until /health says ok.
async function start(args) {
  const child = spawn(attend, ["serve", "--model", model, "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    child.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    child.on("exit", (code) => reject(new Error(`attend serve exited (${code}): ${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const r = await fetch(`${base}/health`);
    if (r.status === 200) break;
    assert.equal(r.status, 503, "/health while loading");
    assert.equal((await r.json()).status, "loading");
    if (i > 600) throw new Error("the model did not load");
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, base, log: () => log };
}

// SIGINT and SIGTERM: no handler (one would run on any thread, and oneDNN's JIT GEMM kernels point rsp into the
// heap: its frame would corrupt it); every thread blocks both but the one waiting for them with sigwait.
function checkSignalThreads(pid) {
  const both = (1n << BigInt(2 - 1)) | (1n << BigInt(15 - 1));
  const field = (text, name) => BigInt("0x" + text.match(new RegExp(name + ":\\s*([0-9a-f]+)"))[1]);
  assert.equal(field(fs.readFileSync(`/proc/${pid}/status`, "utf8"), "SigCgt") & both, 0n, "no SIGINT/SIGTERM handler");
  const tasks = fs.readdirSync(`/proc/${pid}/task`);
  const taking = tasks.filter((t) => {
    try {
      return (field(fs.readFileSync(`/proc/${pid}/task/${t}/status`, "utf8"), "SigBlk") & both) !== both;
    } catch {
      return false;  // a thread that just ended
    }
  });
  assert.equal(taking.length, 1, `one thread of ${tasks.length} takes SIGINT and SIGTERM`);
}

async function stop(server) {
  checkSignalThreads(server.child.pid);
  server.child.kill("SIGTERM");
  const code = await new Promise((r) => server.child.on("exit", (c, s) => r(c ?? s)));
  assert.equal(code, 0, "attend serve stops cleanly on SIGTERM");
}

const post = (base, path, body, headers = {}) =>
  fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}`, ...headers },
                       body: typeof body === "string" ? body : JSON.stringify(body) });

async function expectError(response, status, fields = {}) {
  assert.equal(response.status, status, `status ${response.status}, expected ${status}`);
  const body = await response.json();
  assert.ok(body.error && typeof body.error.message === "string" && body.error.message.length > 0, JSON.stringify(body));
  for (const [k, v] of Object.entries(fields)) assert.equal(body.error[k], v, JSON.stringify(body));
  return body.error;
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
  assert.ok(m, `${name} in /metrics`);
  return Number(m[1]);
}

async function collectStream(stream) {
  const texts = {};
  const finish = {};
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      const t = c.delta ? c.delta.content ?? "" : c.text;
      texts[c.index] = (texts[c.index] ?? "") + t;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, finish };
}

// Each section names itself, so that a failure says where it was.
const section = (name) => console.log(`- ${name}`);

const server = await start(["--parallel", "4", "--api-key", KEY, "--max-body", "100000", "--read-timeout", "2", "--alias", "tiny"]);
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: KEY, maxRetries: 0 });

section("models");
// Models.
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);

section("completions");
// Completions: greedy is deterministic, the budget is kept, usage adds up.
const completion = await client.completions.create({ model: "tiny", prompt: "the cat sat", max_tokens: 12, temperature: 0 });
assert.equal(completion.object, "text_completion");
assert.equal(completion.choices.length, 1);
assert.equal(completion.choices[0].finish_reason, "length");
assert.equal(completion.usage.completion_tokens, 12);
assert.equal(completion.usage.total_tokens, completion.usage.prompt_tokens + 12);
const again = await client.completions.create({ model: "tiny", prompt: "the cat sat", max_tokens: 12, temperature: 0 });
assert.equal(again.choices[0].text, completion.choices[0].text);

section("echo, n, logprobs");
// Echo, n, logprobs.
const echoed = await client.completions.create({ model: "tiny", prompt: "the dog", max_tokens: 3, temperature: 0, echo: true });
assert.ok(echoed.choices[0].text.startsWith("the dog"));
const several = await client.completions.create({ model: "tiny", prompt: "the", max_tokens: 8, n: 3, seed: 5, logprobs: 2 });
assert.equal(several.choices.length, 3);
for (const c of several.choices) {
  assert.equal(c.logprobs.tokens.length, 8);
  for (const lp of c.logprobs.token_logprobs) assert.ok(lp <= 0);
  for (const top of c.logprobs.top_logprobs) assert.equal(Object.keys(top).length <= 2, true);
}

section("chat");
// Chat, then the same request streamed: the same text.
const messages = [{ role: "system", content: "be brief" }, { role: "user", content: "where did the cat sit?" }];
const chat = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 16, seed: 42, temperature: 0.8 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
const streamed = await collectStream(await client.chat.completions.create({ model: "tiny", messages, max_tokens: 16, seed: 42,
                                                                              temperature: 0.8, stream: true,
                                                                              stream_options: { include_usage: true } }));
assert.equal(streamed.texts[0], chat.choices[0].message.content);
assert.equal(streamed.finish[0], chat.choices[0].finish_reason);
const withLogprobs = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
assert.equal(withLogprobs.choices[0].logprobs.content.length, 4);
assert.equal(withLogprobs.choices[0].logprobs.content[0].top_logprobs.length, 3);
// The same conversation as the client's typed content parts and the developer role: the template gets the same
// text, so greedy decoding gives the same reply.
const greedyPlain = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, temperature: 0 });
const greedyParts = await client.chat.completions.create({
  model: "tiny", max_tokens: 8, temperature: 0,
  messages: [{ role: "developer", content: [{ type: "text", text: "be brief" }] },
             { role: "user", content: [{ type: "text", text: "where did the cat sit?" }] }] });
assert.equal(greedyParts.choices[0].message.content, greedyPlain.choices[0].message.content);
assert.equal(greedyParts.usage.prompt_tokens, greedyPlain.usage.prompt_tokens);
await assert.rejects(client.chat.completions.create({
  model: "tiny", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] }),
  (e) => e.status === 400 && e.param === "messages");

section("a browser's cross-origin call");
const preflight = await fetch(`${server.base}/v1/chat/completions`, {
  method: "OPTIONS", headers: { Origin: "http://localhost:3000", "Access-Control-Request-Method": "POST",
                                "Access-Control-Request-Headers": "authorization,content-type" } });
assert.equal(preflight.status, 204);
assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
const crossOrigin = await fetch(`${server.base}/v1/models`, { headers: { Origin: "http://localhost:3000",
                                                                        Authorization: `Bearer ${KEY}` } });
assert.equal(crossOrigin.status, 200);
assert.equal(crossOrigin.headers.get("access-control-allow-origin"), "*");

section("embeddings");
// Embeddings: unit vectors, one per input, float and base64 alike.
const emb = await client.embeddings.create({ model: "tiny", input: ["the cat", "the dog sat on the mat"] });
assert.equal(emb.data.length, 2);
for (const d of emb.data) {
  const norm = Math.hypot(...d.embedding);
  assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
}
const b64 = await client.embeddings.create({ model: "tiny", input: "the cat", encoding_format: "base64" });
// Node's Buffer may sit anywhere in a shared pool: copy its bytes out before reading them as floats (reading the
// pool from 0 made this check flaky).
const floats = new Float32Array(Uint8Array.from(Buffer.from(b64.data[0].embedding, "base64")).buffer);
assert.equal(floats.length, emb.data[0].embedding.length);
// "the cat" alone and beside a longer input: the same sums over rows multiplied in batches of other sizes (the
// per-row kernel for a few rows, the GEMM for more), so equal only to fp32 rounding through the layers: a few
// ulps of each of d_model-long dot products a layer, well under 1e-5 of a unit vector's entries.
for (let i = 0; i < floats.length; ++i)
  assert.ok(Math.abs(floats[i] - emb.data[0].embedding[i]) < 1e-5,
            `entry ${i}: ${floats[i]} (base64, alone) against ${emb.data[0].embedding[i]} (float, in a batch of two)`);

section("concurrent streams");
// Many streams at once (a long shared start, so that the prefix cache is hit), each equal to its run alone.
const shared = "the cat sat on the mat and the dog ran to the park with a ball. ".repeat(8);
const requests = Array.from({ length: 10 }, (_, i) => ({
  model: "tiny", prompt: (i % 2 ? shared : "") + `the ${i} dog`, max_tokens: 20 + i, seed: 100 + i,
  temperature: i % 3 === 0 ? 0 : 0.9, top_p: 0.95,
}));
const alone = [];
for (const r of requests) alone.push((await client.completions.create(r)).choices[0].text);
const cachedBefore = await metric(server.base, "attend_prompt_tokens_cached_total");
const together = await Promise.all(requests.map(async (r) => (await collectStream(await client.completions.create({ ...r, stream: true }))).texts[0]));
assert.deepEqual(together, alone, "each stream equals its run alone");
assert.ok((await metric(server.base, "attend_prompt_tokens_cached_total")) > cachedBefore, "the shared start came from the prefix cache");

section("bad input");
// Bad input, each a clear 4xx.
await expectError(await post(server.base, "/v1/completions", "{not json"), 400);
await expectError(await post(server.base, "/v1/completions", { prompt: "x", max_tokens: "many" }), 400, { param: "max_tokens" });
await expectError(await post(server.base, "/v1/completions", { prompt: "x", temperature: 5 }), 400, { param: "temperature" });
await expectError(await post(server.base, "/v1/chat/completions", { messages: "hi" }), 400, { param: "messages" });
await expectError(await post(server.base, "/v1/completions", { model: "gpt-9", prompt: "x" }), 404, { code: "model_not_found" });
await expectError(await post(server.base, "/v1/completions", { prompt: "the cat ".repeat(400), max_tokens: 4 }), 400,
                  { code: "context_length_exceeded" });
await expectError(await post(server.base, "/v1/completions", { prompt: "x".repeat(200000) }), 413);
await expectError(await post(server.base, "/v1/completions", { prompt: "x" }, { Authorization: "Bearer wrong" }), 401,
                  { code: "invalid_api_key" });
await expectError(await fetch(`${server.base}/v1/models`), 401);
await expectError(await fetch(`${server.base}/v1/nothing`, { headers: { Authorization: `Bearer ${KEY}` } }), 404);
await assert.rejects(client.completions.create({ model: "other", prompt: "x" }), (e) => e.status === 404);
await assert.rejects(new OpenAI({ baseURL: `${server.base}/v1`, apiKey: "nope", maxRetries: 0 }).models.list(), (e) => e.status === 401);

section("disconnect");
// A disconnect mid-stream: the request's blocks go back, and the server goes on serving.
{
  const controller = new AbortController();
  const res = await fetch(`${server.base}/v1/completions`, {
    method: "POST", signal: controller.signal, headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ prompt: "the cat", max_tokens: 400, stream: true, temperature: 0 }) });
  const reader = res.body.getReader();
  await reader.read();
  controller.abort();
  let used = 1;
  for (let i = 0; i < 200 && used > 0; i++) {
    await new Promise((r) => setTimeout(r, 25));
    used = await metric(server.base, "attend_kv_blocks_in_use");
  }
  assert.equal(used, 0, "the abandoned stream's KV blocks are free");
}

section("slow client");
// A slow client (headers never finished) gets 408 or 400 after --read-timeout and is dropped; others are served
// meanwhile.
{
  const socket = net.connect(Number(new URL(server.base).port), "127.0.0.1");
  await new Promise((r) => socket.on("connect", r));
  const t0 = Date.now();
  let answer = "";
  const answered = new Promise((resolve) => {
    socket.on("data", (d) => { answer += d; resolve("answered"); });
    socket.on("close", () => resolve("closed"));
  });
  socket.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n");
  const meanwhile = await client.completions.create({ model: "tiny", prompt: "the cat sat", max_tokens: 12, temperature: 0 });
  assert.equal(meanwhile.choices[0].text, completion.choices[0].text);
  const how = await Promise.race([answered, new Promise((r) => setTimeout(() => r("nothing"), 15000))]);
  console.log(`  ${how} after ${((Date.now() - t0) / 1000).toFixed(1)} s: ${answer.split("\r\n")[0]}`);
  assert.ok(how === "closed" || /^HTTP\/1\.1 4\d\d/.test(answer), `the slow client got ${how}: ${answer}`);
  socket.destroy();
}

section("still serving");
// Still serving after all of that.
assert.equal((await client.completions.create({ model: "tiny", prompt: "the cat sat", max_tokens: 12, temperature: 0 })).choices[0].text,
             completion.choices[0].text);
await stop(server);

section("full queue");
// A full queue answers 429 with Retry-After.
{
  const busy = await start(["--parallel", "1", "--queue", "1"]);
  const body = { prompt: "the cat", max_tokens: 300, temperature: 0 };
  const responses = await Promise.all(Array.from({ length: 6 }, () => post(busy.base, "/v1/completions", body)));
  const statuses = responses.map((r) => r.status).sort();
  assert.ok(statuses.includes(200), `statuses ${statuses}`);
  const refused = responses.filter((r) => r.status === 429);
  assert.ok(refused.length > 0, `statuses ${statuses}`);
  assert.equal(refused[0].headers.get("retry-after"), "1");
  await expectError(refused[0], 429, { code: "queue_full" });
  for (const r of responses) if (r.status === 200) await r.json();
  await stop(busy);
}
console.log("openai client: all checks passed");

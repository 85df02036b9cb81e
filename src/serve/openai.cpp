#include "serve/openai.h"

#include "core/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace attend::serve {

using nlohmann::json;

std::string error_body(const std::string& message, std::string_view type, std::string_view param,
                       std::string_view code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// A short picture of a value for an error message (a huge array or string is not repeated back in full).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

json parse_body(std::string_view body) {
  if (!json_depth_within(body)) bad("", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("", "the request body is not valid JSON");
  return j;
}

json parse_object(std::string_view body) {
  json j = parse_body(body);
  if (!j.is_object()) bad("", fmt::format("the request body is {}, expected a JSON object", shown(j)));
  return j;
}

// The field if present and not null.
const json* field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* key, double fallback, double lo, double hi) {
  const json* v = field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) bad(key, fmt::format("'{}' is {}, expected a number", key, shown(*v)));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(key, fmt::format("'{}' is {}, expected a number in [{}, {}]", key, x, lo, hi));
  return x;
}

std::optional<int64_t> integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) bad(key, fmt::format("'{}' is {}, expected an integer", key, shown(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(key, fmt::format("'{}' is {}, expected an integer in [{}, {}]", key, shown(*v), lo, hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("'{}' is {}, expected an integer in [{}, {}]", key, x, lo, hi));
  return x;
}

bool boolean(const json& j, const char* key, bool fallback) {
  const json* v = field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(key, fmt::format("'{}' is {}, expected true or false", key, shown(*v)));
  return v->get<bool>();
}

std::string string(const json& j, const char* key) {
  const json* v = field(j, key);
  if (v == nullptr) return {};
  if (!v->is_string()) bad(key, fmt::format("'{}' is {}, expected a string", key, shown(*v)));
  return v->get<std::string>();
}

std::vector<int32_t> ids(const json& v, const std::string& where) {
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(where, fmt::format("'{}' holds {}, expected token ids (non-negative integers)", where, shown(x)));
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return out;
}

constexpr size_t kMaxPrompts = 1024;

// A string, a list of strings, a list of ids, or a list of lists of ids (OpenAI's prompt and input).
std::vector<Prompt> prompts(const json& v, const char* key) {
  std::vector<Prompt> out;
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || v.empty())
    bad(key, fmt::format("'{}' is {}, expected a string, a list of strings, token ids or lists of token ids", key,
                         shown(v)));
  if (v.size() > kMaxPrompts) bad(key, fmt::format("'{}' holds {} items; at most {} are served at once", key, v.size(), kMaxPrompts));
  if (v[0].is_number()) return {ids(v, key)};
  for (const json& x : v) {
    if (x.is_string()) out.emplace_back(x.get<std::string>());
    else if (x.is_array() && !x.empty()) out.emplace_back(ids(x, key));
    else bad(key, fmt::format("'{}' holds {}, expected strings or non-empty lists of token ids", key, shown(x)));
  }
  return out;
}

// A list of adapters and their scales (LoraScales); `param` names it in errors: "lora", or "" for a whole body.
LoraScales lora_scales(const json& l, const std::string& param) {
  const std::string what = param.empty() ? "the request body" : "'" + param + "'";
  constexpr size_t kMaxAdapters = 64;  // a model's adapter slots
  if (!l.is_array() || l.size() > kMaxAdapters)
    bad(param, fmt::format("{} is {}, expected a list of at most {} objects {{\"id\": N, \"scale\": S}}", what,
                           shown(l), kMaxAdapters));
  LoraScales out;
  for (const json& a : l) {
    const json* id_field = a.is_object() ? field(a, "id") : nullptr;
    const json* scale_field = a.is_object() ? field(a, "scale") : nullptr;
    if (id_field == nullptr || !id_field->is_number_integer() || id_field->get<int64_t>() < 0 ||
        id_field->get<int64_t>() >= static_cast<int64_t>(kMaxAdapters))
      bad(param, fmt::format("{} holds {}, expected objects {{\"id\": N, \"scale\": S}} with N an adapter's index "
                             "(0-{})", what, shown(a), kMaxAdapters - 1));
    if (scale_field == nullptr || !scale_field->is_number() || !(std::abs(scale_field->get<double>()) <= 1e6))
      bad(param, fmt::format("{} holds {}: its 'scale' must be a number in [-1e6, 1e6]", what, shown(a)));
    const int64_t id = id_field->get<int64_t>();
    for (const auto& [other, s] : out)
      if (other == id) bad(param, fmt::format("{} lists the adapter {} twice", what, id));
    out.emplace_back(id, scale_field->get<double>());
  }
  return out;
}

// A chat message as the model's template reads it: content as one string, as the templates of text models take
// it (Llama 3's `content | trim` failed on OpenAI's list of text parts, Qwen3's dropped a system message given
// so): the text parts joined by newlines (vLLM's "string" content format), null (an assistant turn that only
// called tools) empty; the "developer" role, which OpenAI's newer models read as "system", as "system". Other
// fields (name, tool_calls, tool_call_id) stay for the templates that use them.
json template_message(const json& msg) {
  json out = msg;
  if (out["role"] == "developer") out["role"] = "system";
  const auto c = out.find("content");
  if (c == out.end() || c->is_null()) {
    out["content"] = "";
  } else if (c->is_array()) {
    std::string text;
    for (const json& part : *c) {
      const auto type = part.is_object() ? part.find("type") : part.end();
      if (type == part.end() || !type->is_string())
        bad("messages", fmt::format("a message's content holds {}, expected parts {{\"type\": \"text\", \"text\": ...}}", shown(part)));
      if (*type != "text")
        bad("messages", fmt::format("a message's content holds a part of type {}: the model reads text only", shown(*type)));
      const auto t = part.find("text");
      if (t == part.end() || !t->is_string())
        bad("messages", fmt::format("a text part is {}, expected a string 'text'", shown(part)));
      text += (text.empty() ? "" : "\n") + t->get<std::string>();
    }
    *c = text;
  } else if (!c->is_string()) {
    bad("messages", fmt::format("'messages' holds a message whose 'content' is {}, expected a string or a list of parts", shown(*c)));
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, bool chat) {
  const json j = parse_object(body);
  CompletionRequest r;
  r.chat = chat;
  r.model = string(j, "model");
  if (chat) {
    const json* m = field(j, "messages");
    if (m == nullptr) bad("messages", "'messages' is required");
    if (!m->is_array() || m->empty()) bad("messages", fmt::format("'messages' is {}, expected a non-empty list", shown(*m)));
    r.messages = json::array();
    for (const json& msg : *m) {
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
        bad("messages", fmt::format("'messages' holds {}, expected objects with a string 'role'", shown(msg)));
      r.messages.push_back(template_message(msg));
    }
    if (const json* t = field(j, "tools")) {
      if (!t->is_array()) bad("tools", fmt::format("'tools' is {}, expected a list", shown(*t)));
      r.tools = *t;
    }
    // "none" and "auto" are what the template and the model do anyway; a call that must be made is not (the reply's
    // tool calls come back as its text, not parsed into tool_calls).
    if (const json* c = field(j, "tool_choice"))
      if (!c->is_string() || (*c != "none" && *c != "auto"))
        bad("tool_choice", fmt::format("'tool_choice' is {}: only \"auto\" and \"none\" are served (tool calls are "
                                       "not parsed from the reply; docs/SERVER.md)", shown(*c)));
    if (const json* f = field(j, "response_format")) {
      const auto type = f->is_object() ? f->find("type") : f->end();
      if (type == f->end() || !type->is_string() || type->get<std::string>() != "text")
        bad("response_format", "only response_format {\"type\": \"text\"} is served (no constrained decoding)");
    }
  } else {
    const json* p = field(j, "prompt");
    if (p == nullptr) bad("prompt", "'prompt' is required");
    r.prompts = prompts(*p, "prompt");
    if (!string(j, "suffix").empty()) bad("suffix", "'suffix' (insertion) is not served");
  }
  r.max_tokens = integer(j, chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", 1,
                         std::numeric_limits<int32_t>::max());
  r.n = integer(j, "n", 1, 128).value_or(1);
  if (const auto best_of = integer(j, "best_of", 1, 128); best_of && *best_of != r.n)
    bad("best_of", "'best_of' other than n is not served");
  r.temperature = number(j, "temperature", 1.0, 0.0, 2.0);
  r.top_p = number(j, "top_p", 1.0, 0.0, 1.0);
  if (r.top_p == 0.0) bad("top_p", "'top_p' is 0, expected a number in (0, 1]");
  r.top_k = integer(j, "top_k", 0, std::numeric_limits<int32_t>::max()).value_or(0);
  if (const json* s = field(j, "seed")) {
    if (!s->is_number_integer()) bad("seed", fmt::format("'seed' is {}, expected an integer", shown(*s)));
    r.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  }
  if (const json* s = field(j, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const json& x : *s) {
        if (!x.is_string()) bad("stop", fmt::format("'stop' holds {}, expected strings", shown(x)));
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' is {}, expected a string or a list of at most 16 strings", shown(*s)));
    }
    for (const std::string& x : r.stop)
      if (x.empty()) bad("stop", "'stop' holds an empty string");
  }
  r.presence_penalty = number(j, "presence_penalty", 0.0, -2.0, 2.0);
  r.frequency_penalty = number(j, "frequency_penalty", 0.0, -2.0, 2.0);
  if (const json* b = field(j, "logit_bias")) {
    if (!b->is_object()) bad("logit_bias", fmt::format("'logit_bias' is {}, expected an object of token ids to biases", shown(*b)));
    for (const auto& [key, value] : b->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
        bad("logit_bias", fmt::format("'logit_bias' has the key {}, expected token ids", shown(json(key))));
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
        bad("logit_bias", fmt::format("'logit_bias' gives {} the bias {}, expected a number in [-100, 100]", key, shown(value)));
      r.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  if (chat) {
    const bool want = boolean(j, "logprobs", false);
    const auto top = integer(j, "top_logprobs", 0, 20);
    if (top && !want) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.logprobs = want ? top.value_or(0) : -1;
  } else {
    // An integer (the alternatives per token); false, as chat's flag, asks for none.
    const json* lp = field(j, "logprobs");
    r.logprobs = lp != nullptr && lp->is_boolean() && !lp->get<bool>() ? -1 : integer(j, "logprobs", 0, 20).value_or(-1);
    r.echo = boolean(j, "echo", false);
    if (r.echo && r.logprobs >= 0) bad("echo", "'echo' with 'logprobs' (the prompt's log-probabilities) is not served");
  }
  r.stream = boolean(j, "stream", false);
  if (const json* o = field(j, "stream_options")) {
    if (!o->is_object()) bad("stream_options", fmt::format("'stream_options' is {}, expected an object", shown(*o)));
    r.include_usage = boolean(*o, "include_usage", false);
  }
  r.ignore_eos = boolean(j, "ignore_eos", false);
  r.user = string(j, "user");
  if (const json* l = field(j, "lora")) r.lora = lora_scales(*l, "lora");
  return r;
}

EmbeddingRequest parse_embedding_request(std::string_view body) {
  const json j = parse_object(body);
  EmbeddingRequest r;
  r.model = string(j, "model");
  const json* input = field(j, "input");
  if (input == nullptr) bad("input", "'input' is required");
  r.inputs = prompts(*input, "input");
  const std::string format = string(j, "encoding_format");
  if (!format.empty() && format != "float" && format != "base64")
    bad("encoding_format", fmt::format("'encoding_format' is \"{}\", expected \"float\" or \"base64\"", format));
  r.base64 = format == "base64";
  if (field(j, "dimensions") != nullptr) bad("dimensions", "'dimensions' (shortened embeddings) is not served");
  if (const json* l = field(j, "lora")) r.lora = lora_scales(*l, "lora");
  return r;
}

LoraScales parse_lora_adapters_request(std::string_view body) { return lora_scales(parse_body(body), ""); }

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json j = parse_object(body);
  TokenizeRequest r;
  const json* c = field(j, "content");
  if (c == nullptr) c = field(j, "prompt");
  if (c == nullptr || !c->is_string()) bad("content", "'content' is required: the text to tokenize");
  r.content = c->get<std::string>();
  r.add_special = boolean(j, "add_special", true);
  r.with_pieces = boolean(j, "with_pieces", false);
  return r;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body) {
  const json j = parse_object(body);
  const json* t = field(j, "tokens");
  if (t == nullptr || !t->is_array()) bad("tokens", "'tokens' is required: a list of token ids");
  return ids(*t, "tokens");
}

}  // namespace attend::serve

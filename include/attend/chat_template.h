// Chat templates: a model's conversation format, a Jinja template from its tokenizer_config.json, rendered
// the way Hugging Face renders it (transformers' apply_chat_template; @huggingface/jinja is the oracle of
// the tests). docs/FORMATS.md lists the Jinja that is understood and where the template is read from.
//
//   auto tmpl = attend::ChatTemplate::from_model_dir("models/qwen2.5-0.5b-instruct");
//   std::string prompt = tmpl.render({{"system", "Be brief."}, {"user", "Hi!"}}, {.add_generation_prompt = true});
//
// Errors are attend::Error naming the template, line and column: a syntax error says what was expected,
// a failing operation what it was applied to, and a template's raise_exception(msg) gives msg.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attend {

// One turn of a conversation with text content. Richer messages (content as a list of parts, tool
// calls, a tool's name) go in as JSON through ChatTemplate::render_json.
struct ChatMessage {
  std::string role;     // e.g. "system", "user", "assistant", "tool"
  std::string content;
};

// Bounds that no template can pass, whatever its input: each is an attend::Error naming the limit.
struct ChatTemplateLimits {
  int max_nesting = 128;             // blocks and expressions nested in the source; macro calls nested in a render
  int64_t max_steps = 20'000'000;    // expressions and statements evaluated, loop turns, 64-byte units of text made
  size_t max_output = 16u << 20;     // bytes of the rendered text, and of any one string or list made on the way
};

struct ChatRenderOptions {
  bool add_generation_prompt = false;      // end with the header of an assistant turn, for generation
  std::string tools_json;                  // JSON array of tool (function) schemas; empty: `tools` is none
  std::string documents_json;              // JSON array of documents for retrieval templates; empty: none
  std::optional<std::string> bos_token;    // replace the config's BOS/EOS strings (the template's bos_token)
  std::optional<std::string> eos_token;
  std::string extra_json;                  // JSON object of further variables (e.g. {"enable_thinking": false})
  std::optional<int64_t> now;              // seconds since the epoch for strftime_now; default: the clock
};

class ChatTemplate {
 public:
  // A template from its source text; `origin` names it in errors.
  static ChatTemplate from_string(std::string source, std::string origin = "chat_template", ChatTemplateLimits limits = {});
  // The template of a tokenizer_config.json's text: "chat_template" as a string, or as a list of
  // {"name", "template"} from which `name` is taken ("default" when empty, else the first). The config's
  // bos_token and eos_token (strings or {"content": ...} objects) become the template's.
  static ChatTemplate from_tokenizer_config(std::string_view json, std::string_view origin = "tokenizer_config.json",
                                            std::string_view name = "", ChatTemplateLimits limits = {});
  // A model directory: chat_template.jinja if present, else tokenizer_config.json's chat_template, else
  // chat_template.json's; BOS and EOS from tokenizer_config.json. An error says which files were looked for.
  static ChatTemplate from_model_dir(const std::filesystem::path& dir, std::string_view name = "", ChatTemplateLimits limits = {});

  // The conversation as text for the model.
  std::string render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {}) const;
  // The same from a JSON array of messages, each an object with at least "role"; "content" may be a
  // string, null, or a list of parts ({"type": "text", "text": ...}); other keys (tool_calls, name,
  // reasoning_content, ...) reach the template as they are, in their order.
  std::string render_json(std::string_view messages_json, const ChatRenderOptions& options = {}) const;

  const std::string& source() const;
  const std::string& origin() const;
  const std::string& bos_token() const;  // "" when the config has none
  const std::string& eos_token() const;
  // The names of a config's template list ("default", "tool_use", ...); empty for a single template.
  const std::vector<std::string>& available() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace attend

// attend::ChatTemplate: a parsed chat template and the variables transformers' apply_chat_template gives
// it (messages, tools, documents, add_generation_prompt, the special tokens, and any extra ones).
#include <attend/chat_template.h>

#include "core/json_fields.h"
#include "tokenize/jinja_builtins.h"
#include "tokenize/jinja_lexer.h"
#include "tokenize/jinja_parser.h"
#include "tokenize/chat_template_config.h"

#include <attend/error.h>
#include <attend/io.h>

#include <ctime>

namespace attend {

using tokenize::jinja::Value;

struct ChatTemplate::Impl {
  std::string source, origin, bos_token, eos_token;
  std::vector<std::string> names;
  tokenize::jinja::Limits limits;
  tokenize::jinja::Body program;
};

ChatTemplate ChatTemplate::from_string(std::string source, std::string origin, ChatTemplateLimits limits) {
  auto impl = std::make_shared<Impl>();
  impl->limits = {.max_nesting = limits.max_nesting, .max_steps = limits.max_steps, .max_output = limits.max_output};
  impl->source = std::move(source);
  impl->origin = std::move(origin);
  impl->program = tokenize::jinja::parse(tokenize::jinja::tokenize(impl->source, impl->origin), impl->source, impl->origin,
                                         limits.max_nesting);
  ChatTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

ChatTemplate ChatTemplate::from_tokenizer_config(std::string_view json, std::string_view origin, std::string_view name,
                                                 ChatTemplateLimits limits) {
  tokenize::ChatTemplateConfig config = tokenize::read_chat_template_config(json, origin, name);
  check(!config.chat_template.empty(), "{}: has no chat_template (the model may not be a chat model)", origin);
  const std::string where = config.names.empty() ? fmt::format("{}: chat_template", origin)
                                                 : fmt::format("{}: chat_template '{}'", origin, name.empty() ? "default" : name);
  ChatTemplate t = from_string(std::move(config.chat_template), where, limits);
  t.impl_->bos_token = std::move(config.bos_token);
  t.impl_->eos_token = std::move(config.eos_token);
  t.impl_->names = std::move(config.names);
  return t;
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir, std::string_view name, ChatTemplateLimits limits) {
  const auto config_path = dir / "tokenizer_config.json";
  const auto jinja_path = dir / "chat_template.jinja";
  const auto json_path = dir / "chat_template.json";
  std::string config_text = std::filesystem::exists(config_path) ? read_file(config_path) : "{}";
  tokenize::ChatTemplateConfig config = tokenize::read_chat_template_config(config_text, config_path.string(), "");
  ChatTemplate t;
  if (std::filesystem::exists(jinja_path)) {
    t = from_string(read_file(jinja_path), jinja_path.string(), limits);
  } else if (!config.chat_template.empty()) {
    t = from_tokenizer_config(config_text, config_path.string(), name, limits);
  } else if (std::filesystem::exists(json_path)) {
    // chat_template.json (the processors' file): {"chat_template": "..."}.
    t = from_tokenizer_config(read_file(json_path), json_path.string(), name, limits);
  } else {
    throw Error(fmt::format("{}: no chat template (looked for chat_template.jinja, tokenizer_config.json's chat_template "
                            "and chat_template.json)", dir.string()));
  }
  t.impl_->bos_token = config.bos_token;
  t.impl_->eos_token = config.eos_token;
  return t;
}

namespace {

Value json_option(const std::string& text, std::string_view what, bool object) {
  if (text.empty()) return Value::none();
  check_json_depth(text, what);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", what, e.what()));
  }
  check(object ? j.is_object() : j.is_array(), "{}: expected a JSON {}, found {}", what, object ? "object" : "array", j.type_name());
  return Value::from_json(j);
}

}  // namespace

std::string ChatTemplate::render_json(std::string_view messages_json, const ChatRenderOptions& options) const {
  check_json_depth(messages_json, "chat messages");
  nlohmann::ordered_json messages;
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("chat messages: not valid JSON: {}", e.what()));
  }
  check(messages.is_array(), "chat messages: expected a JSON array of messages, found {}", messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i)
    check(messages[i].is_object(), "chat messages: message {} is {}, expected an object with 'role' and 'content'", i,
          messages[i].type_name());

  auto globals = std::make_shared<tokenize::jinja::Scope>();
  tokenize::jinja::install_globals(*globals);
  auto context = std::make_shared<tokenize::jinja::Scope>(globals);
  context->set("messages", Value::from_json(messages));
  context->set("tools", json_option(options.tools_json, "tools", false));
  context->set("documents", json_option(options.documents_json, "documents", false));
  context->set("add_generation_prompt", Value::from_bool(options.add_generation_prompt));
  const std::string bos = options.bos_token.value_or(impl_->bos_token), eos = options.eos_token.value_or(impl_->eos_token);
  if (!bos.empty() || options.bos_token) context->set("bos_token", Value::from_string(bos));
  if (!eos.empty() || options.eos_token) context->set("eos_token", Value::from_string(eos));
  const Value extra = json_option(options.extra_json, "extra variables", true);
  if (extra.is_dict())
    for (const auto& [key, v] : extra.dict->entries()) context->set(key, v);

  tokenize::jinja::Interpreter interpreter(impl_->source, impl_->origin, impl_->limits,
                                           options.now ? static_cast<std::time_t>(*options.now) : std::time(nullptr));
  return interpreter.render(impl_->program, context);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return render_json(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), options);
}

const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::origin() const { return impl_->origin; }
const std::string& ChatTemplate::bos_token() const { return impl_->bos_token; }
const std::string& ChatTemplate::eos_token() const { return impl_->eos_token; }
const std::vector<std::string>& ChatTemplate::available() const { return impl_->names; }

}  // namespace attend

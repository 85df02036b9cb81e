// tokenizer_config.json's chat template and BOS/EOS strings (see chat_template_config.h).
#include "tokenize/chat_template_config.h"

#include "core/json_fields.h"

#include <attend/error.h>

namespace attend::tokenize {

std::string special_token_text(const nlohmann::json& v, std::string_view origin, std::string_view field) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto it = v.find("content");
    check(it != v.end() && it->is_string(), "{}: {} is an object without a string 'content'", origin, field);
    return it->get<std::string>();
  }
  throw Error(fmt::format("{}: {} is {}, expected a string or an object with 'content'", origin, field, v.type_name()));
}

ChatTemplateConfig read_chat_template_config(std::string_view json, std::string_view origin, std::string_view name) {
  const nlohmann::json config = parse_json(json, origin);
  check(config.is_object(), "{}: expected a JSON object, found {}", origin, config.type_name());
  ChatTemplateConfig out;
  if (auto it = config.find("bos_token"); it != config.end()) out.bos_token = special_token_text(*it, origin, "bos_token");
  if (auto it = config.find("eos_token"); it != config.end()) out.eos_token = special_token_text(*it, origin, "eos_token");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    check(name.empty(), "{}: has no chat_template, so none named '{}'", origin, name);
    return out;
  }
  if (it->is_string()) {
    check(name.empty() || name == "default", "{}: chat_template is a single template, not a list with one named '{}'", origin, name);
    out.chat_template = it->get<std::string>();
    return out;
  }
  check(it->is_array(), "{}: chat_template is {}, expected a string or a list of {{\"name\", \"template\"}}", origin, it->type_name());
  std::vector<std::string> sources;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    check(entry.is_object(), "{}: chat_template[{}] is {}, expected an object with 'name' and 'template'", origin, i, entry.type_name());
    auto n = entry.find("name");
    auto t = entry.find("template");
    check(n != entry.end() && n->is_string(), "{}: chat_template[{}] has no string 'name'", origin, i);
    check(t != entry.end() && t->is_string(), "{}: chat_template[{}] has no string 'template'", origin, i);
    out.names.push_back(n->get<std::string>());
    sources.push_back(t->get<std::string>());
  }
  check(!sources.empty(), "{}: chat_template is an empty list", origin);
  const std::string wanted = name.empty() ? "default" : std::string(name);
  for (size_t i = 0; i < sources.size(); ++i)
    if (out.names[i] == wanted) {
      out.chat_template = sources[i];
      return out;
    }
  if (name.empty()) {
    out.chat_template = sources[0];
    return out;
  }
  std::string names;
  for (const std::string& n : out.names) names += (names.empty() ? "" : ", ") + n;
  throw Error(fmt::format("{}: no chat template named '{}' (the config has {})", origin, name, names));
}

}  // namespace attend::tokenize

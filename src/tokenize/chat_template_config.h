// What a chat template needs from a Hugging Face tokenizer_config.json: the template (a string, or a
// list of named templates) and the BOS and EOS strings. Nothing else of the file is read here; the
// tokenizer's own special tokens are the tokenizer loader's business.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

struct ChatTemplateConfig {
  std::string chat_template;          // empty: the config has none
  std::vector<std::string> names;     // the names of a template list, in order (empty for a plain string)
  std::string bos_token, eos_token;   // "" when absent or null
};

// Reads tokenizer_config.json's text. `name` picks from a list of templates ("" picks "default", else the
// first). Errors name the origin and the field: "tokenizer_config.json: chat_template[1] has no 'template'".
ChatTemplateConfig read_chat_template_config(std::string_view json, std::string_view origin, std::string_view name);

// A special token's string as tokenizer_config.json writes it: a string, an AddedToken object
// {"content": ..., ...} (or {"__type": "AddedToken", ...}), or null. Exposed for tests.
std::string special_token_text(const nlohmann::json& value, std::string_view origin, std::string_view field);

}  // namespace attend::tokenize

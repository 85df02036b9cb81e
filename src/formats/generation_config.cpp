// generation_config.json and config.json's token ids (bos_token_id, eos_token_id, pad_token_id,
// decoder_start_token_id), as Hugging Face's generate reads them: generation_config.json first, config.json for what
// it leaves out. eos_token_id may be one id or a list.
#include "core/json_fields.h"
#include "formats/gguf_model.h"

#include <algorithm>
#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>

#include <nlohmann/json.hpp>

#include <limits>
#include <string>

namespace attend {

namespace {

using json = nlohmann::json;

// A token id: a non-negative integer that fits int32. Null or absent: none.
std::optional<int32_t> token_id(const json& file, const char* key, std::string_view origin) {
  const auto it = file.find(key);
  if (it == file.end() || it->is_null()) return std::nullopt;
  check(it->is_number_integer() && it->get<int64_t>() >= 0 &&
            it->get<int64_t>() <= std::numeric_limits<int32_t>::max(),
        "{}: '{}' is {}, expected a token id (a non-negative integer) or null", origin, key, it->dump());
  return static_cast<int32_t>(it->get<int64_t>());
}

std::vector<int32_t> token_ids(const json& file, const char* key, std::string_view origin) {
  const auto it = file.find(key);
  if (it == file.end() || it->is_null()) return {};
  if (!it->is_array()) return {*token_id(file, key, origin)};
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const json one = {{"id", (*it)[i]}};
    const auto id = token_id(one, "id", fmt::format("{}: '{}'[{}]", origin, key, i));
    check(id.has_value(), "{}: '{}'[{}] is null, expected a token id", origin, key, i);
    ids.push_back(*id);
  }
  return ids;
}

json parse_object(std::string_view text, std::string_view origin) {
  if (text.empty()) return json::object();
  check_json_depth(text, origin);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!j.is_discarded(), "{}: not valid JSON", origin);
  check(j.is_object(), "{}: expected a JSON object, found {}", origin, j.type_name());
  return j;
}

}  // namespace

GenerationDefaults parse_generation_defaults(std::string_view generation_config, std::string_view config,
                                             std::string_view generation_origin, std::string_view config_origin) {
  const json g = parse_object(generation_config, generation_origin), c = parse_object(config, config_origin);
  auto one = [&](const char* key) {
    const auto id = token_id(g, key, generation_origin);
    return id ? id : token_id(c, key, config_origin);
  };
  GenerationDefaults d;
  d.bos = one("bos_token_id");
  d.pad = one("pad_token_id");
  d.decoder_start = one("decoder_start_token_id");
  d.eos = token_ids(g, "eos_token_id", generation_origin);
  if (d.eos.empty()) d.eos = token_ids(c, "eos_token_id", config_origin);
  return d;
}

GenerationDefaults read_generation_defaults(const std::filesystem::path& dir) {
  if (formats::is_gguf_file(dir)) {  // a GGUF file's tokenizer.ggml.bos/eos_token_id
    const gguf::Reader file(dir);
    GenerationDefaults d;
    if (file.find("tokenizer.ggml.bos_token_id")) d.bos = static_cast<int32_t>(file.get_uint("tokenizer.ggml.bos_token_id"));
    if (file.find("tokenizer.ggml.eos_token_id")) d.eos.push_back(static_cast<int32_t>(file.get_uint("tokenizer.ggml.eos_token_id")));
    if (file.find("tokenizer.ggml.eot_token_id")) {
      const auto eot = static_cast<int32_t>(file.get_uint("tokenizer.ggml.eot_token_id"));
      if (std::find(d.eos.begin(), d.eos.end(), eot) == d.eos.end()) d.eos.push_back(eot);
    }
    return d;
  }
  const auto generation = dir / "generation_config.json", config = dir / "config.json";
  return parse_generation_defaults(std::filesystem::exists(generation) ? read_file(generation) : "",
                                   std::filesystem::exists(config) ? read_file(config) : "", generation.string(),
                                   config.string());
}

}  // namespace attend

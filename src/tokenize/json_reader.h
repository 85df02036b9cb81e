// Reading Hugging Face's tokenizer JSON (tokenizer.json, and GPT-2's encoder.json): typed access that names
// the file and the field, the walk over nested components, and the vocabulary and merges both formats share.
#pragma once

#include "tokenize/bpe.h"

#include <attend/error.h>

#include <nlohmann/json.hpp>

#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

namespace attend {
struct AddedToken;  // tokenizer_impl.h
}  // namespace attend

namespace attend::tokenize {

using json = nlohmann::json;

// Typed access that names the field: "tokenizer.json: model.unk_id is a string, expected an integer".
struct Reader {
  std::string_view origin;

  const json& field(const json& obj, std::string_view path, std::string_view name) const {
    check(obj.is_object(), "{}: {} is {}, expected an object", origin, path, obj.type_name());
    auto it = obj.find(name);
    check(it != obj.end(), "{}: {} has no field '{}'", origin, path, name);
    return *it;
  }
  const json* optional(const json& obj, std::string_view name) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& v, std::string_view path) const {
    check(v.is_string(), "{}: {} is {}, expected a string", origin, path, v.type_name());
    return v.get<std::string>();
  }
  int64_t integer(const json& v, std::string_view path) const {
    check(v.is_number_integer(), "{}: {} is {}, expected an integer", origin, path, v.type_name());
    return v.get<int64_t>();
  }
  bool boolean(const json* v, std::string_view path, bool fallback) const {
    if (!v) return fallback;
    check(v->is_boolean(), "{}: {} is {}, expected true or false", origin, path, v->type_name());
    return v->get<bool>();
  }
};

// Visits every pre-tokeniser / normaliser / decoder in a possibly nested {"type": "Sequence", ...}.
template <typename F>
void for_each_component(const json* node, F&& fn) {
  if (!node || !node->is_object()) return;
  const std::string type = node->value("type", "");
  if (type == "Sequence") {
    for (const char* list : {"pretokenizers", "normalizers", "decoders", "processors"})
      if (auto it = node->find(list); it != node->end() && it->is_array())
        for (const json& child : *it) for_each_component(&child, fn);
    return;
  }
  fn(*node, type);
}

// The model's vocabulary ({"token": id, ...}) as a dense id -> token table; byte_letters: tokens are written
// in GPT-2's byte letters and become their bytes.
// `unspellable` (byte_letters only): tokens not written in the letters go there by id and stay empty in the
// table; without it they are an error. `gaps`: ids no token has are allowed and listed there (empty in the
// table); without it the ids must be dense.
std::vector<std::string> dense_vocab(const json& vocab, const Reader& r, bool byte_letters,
                                     std::unordered_map<int32_t, std::string>* unspellable = nullptr,
                                     std::vector<int32_t>* gaps = nullptr);
// model.merges ("left right" strings or [left, right] pairs) as pairs of ids of vocab_only's tokens.
std::vector<BpeModel::Merge> read_merges(const json& merges, const Reader& r, const BpeModel& vocab_only,
                                         bool byte_letters);
// An added token's entry at `path` (tokenizer.json's added_tokens[i], tokenizer_config.json's
// added_tokens_decoder["id"]): its content and flags (normalized defaults to !special, as Hugging Face's), for `id`.
AddedToken read_added_token(const json& entry, const Reader& r, const std::string& path, int32_t id);

// A pipeline stage as tokenizer.json writes it: null when it has no steps, the one step itself, or a Sequence listing
// them under `list_key` ("normalizers", "pretokenizers", "decoders", "processors"). A stage read from a Sequence
// (`sequence`) is written back as one.
template <typename Stage, typename WriteStep>
json write_stage(const Stage& stage, const char* list_key, WriteStep&& write_step) {
  if (stage.steps.empty() && !stage.sequence) return nullptr;
  if (stage.steps.size() == 1 && !stage.sequence) return write_step(stage.steps[0]);
  json list = json::array();
  for (const auto& s : stage.steps) list.push_back(write_step(s));
  return {{"type", "Sequence"}, {list_key, list}};
}

// Errors from deep inside (a model's constructor, a JSON value of the wrong type) get the file's name.
template <typename F>
auto naming_origin(std::string_view origin, F&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected structure: {}", origin, e.what()));
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(origin)) throw;
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
}

}  // namespace attend::tokenize

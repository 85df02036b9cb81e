// Hugging Face checkpoint directories: one weights file or shards named by an index, and config keys.
#include "formats/hf_checkpoint.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/tokenizer.h>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::map<std::string, std::string> parse_shard_index(std::string_view text, std::string_view origin) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!j.is_discarded(), "{}: not valid JSON", origin);
  check(j.is_object(), "{}: expected a JSON object with a \"weight_map\"", origin);
  const auto map = j.find("weight_map");
  check(map != j.end() && map->is_object(), "{}: no \"weight_map\" object (tensor name → file)", origin);
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map->items()) {
    check(file.is_string(), "{}: weight_map[\"{}\"] is {}, expected a file name", origin, name, file.type_name());
    const std::string f = file.get<std::string>();
    check(!f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos && f != "." &&
              f != "..",
          "{}: weight_map[\"{}\"] = \"{}\" is not a file name in the checkpoint's directory", origin, name, f);
    out.emplace(name, f);
  }
  check(!out.empty(), "{}: the weight_map names no tensor", origin);
  return out;
}

CheckpointTensors::CheckpointTensors(const fs::path& dir) : dir_(dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single) || !fs::exists(index)) {
    check(fs::exists(single), "{}: no model.safetensors (nor model.safetensors.index.json for shards)", dir.string());
    readers_.push_back(std::make_unique<SafetensorsReader>(single));
    for (const TensorInfo& t : readers_[0]->tensors()) where_.emplace(t.name, 0);
    return;
  }
  const std::map<std::string, std::string> weight_map = parse_shard_index(read_file(index), index.string());
  std::map<std::string, size_t> files;  // shard name → readers_ index
  for (const auto& [name, file] : weight_map) {
    auto [it, added] = files.emplace(file, readers_.size());
    if (added) {
      const fs::path shard = dir / file;
      check(fs::exists(shard), "{}: missing shard {} (model.safetensors.index.json names it for '{}')", dir.string(),
            file, name);
      readers_.push_back(std::make_unique<SafetensorsReader>(shard));
    }
    check(readers_[it->second]->find(name) != nullptr, "{}: the index puts '{}' in {}, which does not hold it",
          index.string(), name, file);
    where_.emplace(name, it->second);
  }
  for (const auto& [file, i] : files)
    for (const TensorInfo& t : readers_[i]->tensors())
      check(where_.contains(t.name) && where_.find(t.name)->second == i,
            "{}: {} holds '{}', which the index does not give it", index.string(), file, t.name);
}

const TensorInfo* CheckpointTensors::find(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : readers_[it->second]->find(name);
}

void CheckpointTensors::load_into(std::string_view name, TensorView out, std::string_view what_for) const {
  const auto it = where_.find(name);
  check(it != where_.end(), "{}: no tensor '{}', which {} has", dir_.string(), name, what_for);
  readers_[it->second]->load_into(name, out);
}

Tensor CheckpointTensors::load(std::string_view name, std::string_view what_for) const {
  const auto it = where_.find(name);
  check(it != where_.end(), "{}: no tensor '{}', which {} has", dir_.string(), name, what_for);
  return readers_[it->second]->load(name);
}

std::vector<std::string> CheckpointTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const std::string& CheckpointTensors::origin(std::string_view name) const {
  return readers_[where_.find(name)->second]->origin();
}

ModelConfig validated(const ModelConfig& c, const std::string& origin) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return c;
}

void ExportChecks::require(bool ok, std::string_view option, std::string_view found, std::string_view wanted) const {
  check(ok, "export {}: {} is {}, {} has {}", format_, option, found, family_, wanted);
}

void ExportChecks::decoder(const ModelConfig& c) const {
  require(c.architecture == Architecture::Decoder, "architecture", architecture_name(c.architecture), "decoder");
  require(c.pre_norm, "norm_placement", "post", "pre");
  require(c.n_experts == 0, "n_experts", std::to_string(c.n_experts), "dense FFNs");
  require(c.residual_scale == 1.0, "residual_scale", std::to_string(c.residual_scale), "1");
  require(c.attention_kernel != AttentionKernel::Linear, "attention_kernel", "linear", "softmax attention");
}

void ExportChecks::unscaled(const ModelConfig& c) const {
  require(c.attention_scale == 0.0, "attention_scale", std::to_string(c.attention_scale), "1/sqrt(d_head)");
  require(!c.scale_embeddings, "scale_embeddings", "true", "unscaled embeddings");
}

void ExportChecks::plain_norms(const ModelConfig& c) const {
  require(!c.sandwich_norm, "sandwich_norm", "true", "two norms a block");
  require(!c.norm_unit_offset, "norm_unit_offset", "true", "norms that multiply by their gain");
}

void create_export_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(fs::is_directory(dir), "{}: cannot create the directory: {}", dir.string(), ec.message());
}

void write_hf_extras(const Tokenizer* tokenizer, const fs::path& dir, nlohmann::ordered_json& config) {
  if (tokenizer == nullptr) return;
  if (const auto bos = tokenizer->special_id(SpecialRole::Bos)) config["bos_token_id"] = *bos;
  if (const auto eos = tokenizer->special_id(SpecialRole::Eos)) config["eos_token_id"] = *eos;
  tokenizer->save(dir / "tokenizer.json");
}

int64_t ConfigKeys::integer(const char* key) const {
  check(j_.contains(key) && j_[key].is_number_integer(), "{}: needs an integer '{}'", origin_, key);
  return j_[key].get<int64_t>();
}

}  // namespace attend::formats

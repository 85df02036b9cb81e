// What every Hugging Face checkpoint directory shares: the weights in model.safetensors, or sharded as
// model-0000k-of-0000n.safetensors with model.safetensors.index.json saying which file holds which tensor,
// and a config.json whose optional keys keep Hugging Face's defaults.
#pragma once

#include "core/json_fields.h"

#include <attend/model.h>
#include <attend/safetensors.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace attend {
class Tokenizer;
}

namespace attend::formats {

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {"tensor name": "file name", ...}}. Returns
// the weight map; errors name `origin` and the entry at fault (a file name must be a plain name in the
// directory: no path separators, no "..").
std::map<std::string, std::string> parse_shard_index(std::string_view text, std::string_view origin);

// The tensors of a checkpoint directory, in one file or in shards.
class CheckpointTensors {
 public:
  // Opens DIR/model.safetensors, or the shards DIR/model.safetensors.index.json names (each checked to hold
  // exactly the tensors the index gives it). Errors name the missing file.
  explicit CheckpointTensors(const std::filesystem::path& dir);

  // The tensor called `name` and its file, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  // Loads tensor `name` into `out` (its shape checked, converted to float); an unknown name is an error
  // naming `what_for` (e.g. "a Llama of this config").
  void load_into(std::string_view name, TensorView out, std::string_view what_for) const;
  // Rows [row0, row0 + rows) of it (SafetensorsReader::load_rows_into).
  void load_rows_into(std::string_view name, int64_t row0, int64_t rows, float* out, std::string_view what_for) const;
  Tensor load(std::string_view name, std::string_view what_for) const;
  // Every tensor name, and the file (or "model.safetensors") that holds it.
  std::vector<std::string> names() const;
  const std::string& origin(std::string_view name) const;  // `name` must be one of names()
  const std::filesystem::path& dir() const { return dir_; }
  // The reader of DIR/model.safetensors when the checkpoint is that one file; nullptr for shards.
  const SafetensorsReader* single() const { return sharded_ ? nullptr : readers_.front().get(); }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name → readers_ index
  bool sharded_ = false;  // read through model.safetensors.index.json
};

// Reads optional config.json keys with Hugging Face's defaults: absent or null keeps the default; present,
// the value must have the default's type (errors name the file and the key).
class ConfigKeys {
 public:
  ConfigKeys(const nlohmann::json& config, std::string origin) : j_(config), origin_(std::move(origin)) {}
  int64_t integer(const char* key) const;  // required
  template <typename T>
  T optional(const char* key, T fallback) const;
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const nlohmann::json& json() const { return j_; }
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// The prefix of Attend's parameter names for decoder block i: "decoder.layers.i.".
std::string decoder_block(int64_t i);

// The configuration a config.json mapped to, checked; an inconsistency is an error naming the file.
ModelConfig validated(const ModelConfig& c, const std::string& origin);

// What an export to a Hugging Face layout checks: each option the layout cannot express is an error
// "export FORMAT: OPTION is FOUND, FAMILY has WANTED".
class ExportChecks {
 public:
  ExportChecks(std::string format, std::string family) : format_(std::move(format)), family_(std::move(family)) {}
  void require(bool ok, std::string_view option, std::string_view found, std::string_view wanted) const;
  // What every decoder layout shares: a decoder of pre-LN blocks with dense FFNs, unscaled residuals and
  // softmax attention.
  void decoder(const ModelConfig& c) const;
  // Embeddings unscaled and scores scaled by 1/√d_head (GPT-2, Llama; not Gemma).
  void unscaled(const ModelConfig& c) const;
  // Two norms a block, multiplying by γ (not Gemma's sandwich of 1 + γ norms).
  void plain_norms(const ModelConfig& c) const;

 private:
  std::string format_, family_;
};

// One Hugging Face tensor and where it lies in Attend's parameters: rows [row, row + its rows) of parameter
// `attend` (a weight's rows keep its columns; a bias or gain is its rows alone). Several tensors can stack into
// one fused parameter: W_Q, W_K, W_V into attn.qkv at rows 0, H·d, (H + Hkv)·d.
struct RowMapping {
  std::string hf, attend;
  int64_t row = 0;
};

// A model of configuration c for a loader to fill as `matrices` (f32, bf16 or f16). In 16 bits the matrices the
// forward multiplies by (Model::multiplies) get packed rows and no fp32 values: a loader reads them through
// load_packed_rows, and finish_loading rounds the rest.
Model model_for_loading(const ModelConfig& c, WeightType matrices, const std::filesystem::path& dir);
// Rounds n fp32 values into packed parameter p's 16 bits from element `at` on.
void fill_packed(Parameter& p, int64_t at, const float* x, int64_t n);
// Checkpoint tensor `name`, whose shape the caller checked, into rows [row, …) of packed parameter p, about 64 MiB
// of fp32 at a time through `scratch` (a Llama-3-8B token table is 2.1 GB in fp32).
void load_packed_rows(const CheckpointTensors& tensors, std::string_view name, Parameter& p, int64_t row,
                      std::string_view what_for, std::vector<float>& scratch);
// After a 16-bit load: what set_storage(matrices) would still pack among the parameters read in fp32.
void finish_loading(Model& model, WeightType matrices);

// Loads every mapped tensor of `tensors` into its rows of `model` (shapes checked, naming the tensor), checks that
// the mapped rows cover each parameter they name, and refuses any tensor that is neither mapped nor `skipped`.
// `what` names the model in errors ("a T5 of this config").
void load_mapped(const CheckpointTensors& tensors, Model& model, const std::vector<RowMapping>& mappings,
                 const std::function<bool(const std::string&)>& skipped, const std::string& what);
// Writes DIR/model.safetensors holding each mapped tensor (its rows of the parameter), in the mapping's order.
void write_mapped(const Model& model, const std::vector<RowMapping>& mappings, const std::filesystem::path& dir,
                  DType dtype = DType::F32);
// config.json's torch_dtype for tensors written as `dtype` (F32, BF16, F16).
const char* torch_dtype_name(DType dtype);

// Creates an export's directory (and its parents); an error names it.
void create_export_directory(const std::filesystem::path& dir);
// An export's tokenizer: its BOS and EOS ids into config.json and tokenizer.json beside it (nothing without one).
void write_hf_extras(const Tokenizer* tokenizer, const std::filesystem::path& dir, nlohmann::ordered_json& config);

template <typename T>
T ConfigKeys::optional(const char* key, T fallback) const {
  if (const auto it = j_.find(key); it != j_.end() && !it->is_null())
    read_field(fallback, *it, fmt::format("{}: '{}'", origin_, key));
  return fallback;
}

}  // namespace attend::formats

// Hugging Face GPT-2 checkpoints as published: config.json with GPT-2's keys (n_embd, n_layer, ...) and
// model.safetensors with Conv1D weights stored [in, out], tensor names with or without "transformer.",
// the buffers h.N.attn.bias / h.N.attn.masked_bias (ignored), and the LM head tied to wte.
#pragma once

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>

namespace attend::formats {

// Whether a parsed config.json is Hugging Face's GPT-2 (model_type "gpt2", or its n_embd/n_layer keys).
bool is_hf_gpt2_config(const nlohmann::json& config);
// Attend's configuration of a Hugging Face GPT-2 config.json; errors name the key.
ModelConfig config_from_hf_gpt2(const nlohmann::json& config, const std::string& origin);
// Loads DIR (config.json; model.safetensors or its shards) as a Hugging Face GPT-2 checkpoint, its matrices
// as `matrices` (model_for_loading).
Model load_hf_gpt2(const std::filesystem::path& dir, const nlohmann::json& config,
                  WeightType matrices = WeightType::F32);

// One Hugging Face tensor and the Attend parameter it is; Conv1D weights ([in, out]) are transposed.
struct Mapping {
  std::string hf, attend;
  bool transpose = false;
};
std::vector<Mapping> gpt2_mappings(const ModelConfig& config);
void transpose_into(Tensor& dst, const Tensor& src);  // src (R, C) → dst (C, R)

}  // namespace attend::formats

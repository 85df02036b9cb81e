// Hugging Face checkpoints of T5 (T5ForConditionalGeneration: t5-small ... t5-11b, T5 v1.1, Flan-T5; mT5 has the
// same layout) as published: config.json with T5's keys, the weights in model.safetensors or in shards.
//
// What T5 is in Attend's options: an encoder-decoder of pre-LN RMSNorm blocks without biases (T5LayerNorm has no
// mean and no bias), scores unscaled (attention_scale 1), relative position buckets (position t5) whose table is
// block 0's, added in every block of the stack (t5_shared_bias), a ReLU FFN (v1.0) or a GELU_tanh-gated one (v1.1,
// geglu), and with tied embeddings the decoder's output × d_model^−½ before the head (lm_head_scale).
#pragma once

#include "formats/hf_checkpoint.h"

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace attend::formats {

// Whether a parsed config.json is T5's (model_type t5 or mt5, or architectures naming T5ForConditionalGeneration
// or MT5ForConditionalGeneration).
bool is_hf_t5_config(const nlohmann::json& config);
// Attend's configuration of such a config.json; missing keys take T5Config's defaults; errors name the key.
ModelConfig config_from_hf_t5(const nlohmann::json& config, const std::string& origin);
// Loads DIR (config.json; model.safetensors or its shards), its matrices as `matrices` (model_for_loading).
Model load_hf_t5(const std::filesystem::path& dir, const nlohmann::json& config,
                  WeightType matrices = WeightType::F32);
// T5ForConditionalGeneration's tensors and where each lies in Attend's parameters.
std::vector<RowMapping> t5_mappings(const ModelConfig& c);

}  // namespace attend::formats

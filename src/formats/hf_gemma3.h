// Hugging Face checkpoints of Gemma 3's text model: Gemma3ForCausalLM (model_type "gemma3_text", the 1B model and
// text-only exports) and the language model inside a multimodal Gemma3ForConditionalGeneration (model_type
// "gemma3": its text_config, its language_model tensors; the vision tower is skipped).
//
// What Gemma adds to the Llama layout, and the ModelConfig options that carry it:
//   RMSNorm x̂·(1 + w), gains stored as offsets from 1           norm_unit_offset
//   four norms a block: each branch's output normalised before  sandwich_norm
//     it is added (post_attention_layernorm, post_feedforward_layernorm)
//   per-head RMSNorm of q and k before RoPE (q_norm, k_norm)     qk_norm
//   embeddings × √hidden_size                                    scale_embeddings
//   scores × query_pre_attn_scalar^−½                            attention_scale
//   GELU_tanh-gated FFN                                          activation geglu
//   local layers: a sliding window and their own RoPE base;     sliding_window, sliding_window_pattern,
//     every sliding_window_pattern-th layer global                rope_local_base
#pragma once

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace attend::formats {

// Whether a parsed config.json is Gemma 3's (model_type gemma3_text or gemma3, or architectures naming
// Gemma3ForCausalLM or Gemma3ForConditionalGeneration).
bool is_hf_gemma3_config(const nlohmann::json& config);
// Attend's configuration of Gemma 3's text model (the file itself, or a multimodal config's text_config); missing
// keys take Gemma3TextConfig's defaults. Errors name the key (soft-capping, biases, bidirectional attention, an irregular
// layer_types list, an activation other than gelu_pytorch_tanh).
ModelConfig config_from_hf_gemma3(const nlohmann::json& config, const std::string& origin);
// Loads DIR (config.json; model.safetensors or its shards).
Model load_hf_gemma3(const std::filesystem::path& dir, const nlohmann::json& config,
                     WeightType matrices = WeightType::F32);

}  // namespace attend::formats

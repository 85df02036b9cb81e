// Hugging Face checkpoints of the Llama family (LlamaForCausalLM: Llama 2, 3, 3.1, 3.2, SmolLM;
// MistralForCausalLM) as published: config.json with Hugging Face's keys, the weights in model.safetensors or
// in shards, tensor names model.layers.N.self_attn.q_proj.weight and so on.
//
// Hugging Face's RoPE rotates the two halves of each head (x_i with x_{i+d/2}); Attend rotates consecutive
// pairs (x_2i with x_2i+1). Loading permutes the rows of W_Q and W_K within each head (row i to 2i, row
// i + d/2 to 2i + 1), so that Attend's rotation of the permuted q and k is Hugging Face's rotation of the
// originals; q·k is the same sum in another order, and V and W_O are untouched. Export permutes back, so a
// round trip is bit for bit.
#pragma once

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>

namespace attend::formats {

// Whether a parsed config.json is of the Llama family (model_type "llama" or "mistral", or architectures
// naming LlamaForCausalLM or MistralForCausalLM).
bool is_hf_llama_config(const nlohmann::json& config);
// Attend's configuration of such a config.json; errors name the key (an unknown rope_scaling type, an
// activation other than silu, biases Attend cannot place, a head_dim other than hidden_size / heads).
ModelConfig config_from_hf_llama(const nlohmann::json& config, const std::string& origin);
// Loads DIR (config.json; model.safetensors or its shards) as such a checkpoint.
Model load_hf_llama(const std::filesystem::path& dir, const nlohmann::json& config);

// Head-wise row permutations between Hugging Face's half rotation and Attend's pair rotation: rows (heads·d, C).
void rope_rows_from_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C);
void rope_rows_to_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C);

}  // namespace attend::formats

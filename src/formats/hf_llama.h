// Hugging Face checkpoints of the Llama family (LlamaForCausalLM: Llama 2, 3, 3.1, 3.2, SmolLM;
// MistralForCausalLM) as published: config.json with Hugging Face's keys, the weights in model.safetensors or
// in shards, tensor names model.layers.N.self_attn.q_proj.weight and so on.
//
// Hugging Face's RoPE rotates the two halves of each head (x_i with x_{i+d/2}); Attend rotates consecutive
// pairs (x_2i with x_2i+1). Loading permutes the rows of W_Q and W_K within each head (row i to 2i, row
// i + d/2 to 2i + 1), so that Attend's rotation of the permuted q and k is Hugging Face's rotation of the
// originals; q·k is the same sum in another order, and V and W_O are untouched. Export permutes back, so a
// round trip is bit for bit.
//
// Gemma 3 (hf_gemma3.cpp) stores its decoder in the same layout with two more norms a block; both families load
// and write their tensors through load_decoder_tensors and write_decoder_tensors here.
#pragma once

#include "formats/hf_checkpoint.h"

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

namespace attend::formats {

// Where a checkpoint's decoder tensors are: `model` begins the names of embed_tokens, layers.N.* and norm, `head`
// is the untied LM head, and tensors starting with one of `ignored` belong to other parts of the checkpoint (a
// multimodal Gemma 3's vision tower) and are skipped.
struct DecoderNames {
  std::string model = "model.";
  std::string head = "lm_head.weight";
  std::vector<std::string> ignored;
};

// Loads the decoder tensors of DIR (model.safetensors or its shards) into a model of configuration `c`: the
// Llama layout, with Gemma's four norms a block when c.sandwich_norm. `what` names the model in errors; a
// missing tensor, a wrong shape or a tensor the model has no place for is an error naming it. `matrices` BF16 or
// F16: the multiplied matrices go straight into that type, packed, with no fp32 values (about 64 MiB of rows at a
// time through an fp32 scratch), and the other parameters are rounded to it: the model load_model(dir, matrices) returns, what
// set_storage(matrices) and hold_as_stored() make of the fp32 one.
Model load_decoder_tensors(const std::filesystem::path& dir, const ModelConfig& c, const DecoderNames& names,
                           const std::string& what, WeightType matrices = WeightType::F32);
// Writes DIR/model.safetensors of such a model under Hugging Face's names, q/k rows unpermuted.
void write_decoder_tensors(const Model& model, const std::filesystem::path& dir, DType dtype = DType::F32);

// The config.json keys the Llama layout's families share (sizes, heads, RMSNorm's ε, RoPE's θ, no biases, the
// tied head), for an export; each family adds its own.
nlohmann::ordered_json decoder_config_json(const ModelConfig& c, const char* architecture, const char* model_type,
                                           DType dtype = DType::F32);
// Whether config.json's "architectures" names one of `names`.
bool names_architecture(const nlohmann::json& config, std::initializer_list<const char*> names);
// config.json's rope_scaling (rope_type llama3, linear, dynamic or default; null or absent: none) into `c`.
void read_rope_scaling(const ConfigKeys& keys, ModelConfig& c);
// The inverse, for an export's config.json; and the RoPE options such a config cannot express.
void write_rope_scaling(const ModelConfig& c, nlohmann::ordered_json& config);
void check_rope_scaling_exports(const ModelConfig& c, const ExportChecks& checks);

// Whether a parsed config.json is of the Llama family (model_type "llama" or "mistral", or architectures
// naming LlamaForCausalLM or MistralForCausalLM).
bool is_hf_llama_config(const nlohmann::json& config);
// Attend's configuration of such a config.json; errors name the key (an unknown rope_scaling type, an
// activation other than silu, biases Attend cannot place, a head_dim other than hidden_size / heads).
ModelConfig config_from_hf_llama(const nlohmann::json& config, const std::string& origin);
// Loads DIR (config.json; model.safetensors or its shards) as such a checkpoint.
Model load_hf_llama(const std::filesystem::path& dir, const nlohmann::json& config,
                    WeightType matrices = WeightType::F32);

// Head-wise row permutations between Hugging Face's half rotation and Attend's pair rotation: rows (heads·d, C).
void rope_rows_from_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C);
void rope_rows_to_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C);
// The same for rows of any bytes (a quantized matrix's rows of blocks move whole).
void rope_row_bytes_from_hf(void* dst, const void* src, int64_t heads, int64_t d_head, int64_t row_bytes);
void rope_row_bytes_to_hf(void* dst, const void* src, int64_t heads, int64_t d_head, int64_t row_bytes);

}  // namespace attend::formats

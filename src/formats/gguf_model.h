// A model from a GGUF file (llama.cpp's format): the configuration from the architecture's metadata keys, the
// tensors by llama.cpp's names, and the tokenizer from tokenizer.ggml.*.
//
//   architecture  as Attend                                   tensors (blk.N.…)
//   gpt2          learned positions, LayerNorm, biases,       token_embd, position_embd, attn_norm, attn_qkv,
//                 GELU (tanh), FFN up/down                    attn_output, ffn_norm, ffn_up, ffn_down, output_norm,
//                                                             output (a copy of token_embd in llama.cpp's files)
//   llama         RoPE on consecutive pairs (llama.cpp's     token_embd, attn_norm, attn_q, attn_k, attn_v,
//   (Mistral)     converter stores Q and K rows in Meta's    attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down,
//                 order: Attend's rotation as it is),        output_norm, output (absent: tied)
//                 RMSNorm, SwiGLU, grouped K/V heads
//
// A matrix of ggml dims [C, R] is R rows of C values: Attend's (R, C). F32, F16 and BF16 tensors become fp32
// values; a quantized matrix the model multiplies keeps its blocks (Parameter::quantized; Q, K and V of one
// block become segments of the fused matrix, each with its type), any other quantized tensor (an untied token
// table, the position table) is dequantized.
#pragma once

#include "formats/gguf.h"

#include <attend/model.h>
#include <attend/tokenizer.h>

#include <filesystem>
#include <optional>

namespace attend::formats {

// Whether `path` is a file that starts with GGUF's magic.
bool is_gguf_file(const std::filesystem::path& path);
ModelConfig config_from_gguf(const gguf::Reader& file);
Model load_gguf_model(const std::filesystem::path& path);
// The tokenizer a GGUF file holds (tokenizer.ggml.model "gpt2": byte-level BPE with its merges); nullopt when it
// holds none. An error for a kind Attend does not read yet, naming it.
std::optional<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path);

}  // namespace attend::formats

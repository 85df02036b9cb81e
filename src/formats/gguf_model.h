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
//   qwen2, qwen3  llama's, with Q, K and V biases (qwen2)    llama's, and attn_q/attn_k/attn_v.bias (qwen2),
//                 or head norms (qwen3), and RoPE            attn_q_norm/attn_k_norm (qwen3)
//                 on halves (NEOX): Q and K rows (and
//                 biases, head norms) in Hugging Face's order,
//                 permuted to Attend's pairs on reading and
//                 back on writing; quantized rows move whole
//   gemma3        qwen3's, with GELU-gated FFNs, four norms  qwen3's, and post_attention_norm, post_ffw_norm
//                 a block (stored as 1 + γ), embeddings
//                 × √d_model, sliding-window layers with
//                 their own RoPE base
//   bert          an encoder: post-LN blocks with biases,   token_embd, position_embd, token_types,
//                 learned positions and token types, a     token_embd_norm, attn_q/k/v, attn_output,
//                 norm over the embeddings, exact GELU;     attn_output_norm, ffn_up, ffn_down,
//                 pooled by pooling_type                    layer_output_norm (weights, biases); cls, cls.output
//
// RoPE scaling: linear (rope.scaling.type/factor), and Llama 3.1's as the rope_freqs tensor (llama).
//
// A matrix of ggml dims [C, R] is R rows of C values: Attend's (R, C). F32, F16 and BF16 tensors become fp32
// values; a quantized matrix that the model multiplies or looks rows up in is used where it lies in the file's
// mapping (Parameter::quantized: segments of rows, Q, K and V each with its type), without float values (see
// Model::ensure_values), and export_gguf writes the blocks back as they came.
#pragma once

#include "formats/gguf.h"

#include <attend/model.h>
#include <attend/tokenizer.h>

#include <filesystem>
#include <optional>

namespace attend::formats {

// Where one GGUF tensor lies in Attend's parameters: rows [row, row + rows) of parameter `attend` (a 1-dimensional
// tensor is its rows alone). `rope_heads` > 0: the rows are that many heads of Q or K in Hugging Face's half
// order (NEOX), which Attend keeps as pairs.
struct GgufPlace {
  std::string gguf, attend;
  int64_t row = 0, rows = 0;
  int64_t rope_heads = 0;
};
// Every tensor of a model of `arch` and configuration `c`, in llama.cpp's order; with `output` the LM head's own
// tensor (from lm_head, or from the tied embedding: gpt2 files always have one).
std::vector<GgufPlace> gguf_places(const ModelConfig& c, const std::string& arch, bool output);

// Attend's weight type of a ggml tensor type id (nullopt for one Attend does not run), and the other way.
std::optional<WeightType> gguf_weight_type(uint32_t id);
uint32_t gguf_type_id(WeightType type);

// Whether `path` is a file that starts with GGUF's magic.
bool is_gguf_file(const std::filesystem::path& path);

// A GGUF LoRA adapter (llama.cpp's: general.type "adapter", adapter.type "lora", adapter.lora.alpha, tensors
// "<base tensor>.lora_a" (ggml dims [in, rank]: rank rows of `in`) and ".lora_b" ([rank, out]: out rows of rank),
// norm tensors skipped as llama.cpp skips them, as convert_lora_to_gguf.py and `attend export
// --format gguf-lora` write them) added to the model as load_peft_adapter adds a PEFT directory's; returns its slot.
// Each tensor pair's update is multiplier · (alpha / its rank) · B·A, as llama.cpp applies it (alpha 0: multiplier ·
// B·A). A file with one rank on every block of each projection it adapts loads as a LoRA run's own set (r, the file's
// alpha); any other module by module (LoraConfig::per_module). Errors name the file and the tensor: another
// architecture, a tensor of no projection Attend adapts (the embeddings, the LM head), a shape or a pair that does
// not fit.
int load_gguf_lora(Model& model, const std::filesystem::path& path, const std::string& name, double multiplier);
ModelConfig config_from_gguf(const gguf::Reader& file);
Model load_gguf_model(const std::filesystem::path& path);
// The tokenizer a GGUF file holds (tokenizer.ggml.model "gpt2": byte-level BPE with its merges; "llama":
// SentencePiece; "bert": WordPiece); nullopt when it holds none. An error for a kind Attend does not read yet,
// naming it.
std::optional<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path);
std::optional<std::string> gguf_chat_template(const std::filesystem::path& path);
// Llama 3.1's RoPE scaling of `c` as llama.cpp's rope_freqs tensor holds it: the factor each of a head's
// d_head / 2 frequencies is divided by (written by export_gguf, matched by the reader).
std::vector<float> llama3_rope_factors(const ModelConfig& c);
// The score scale llama.cpp gives a Gemma 3 of this shape: 1/√(d_model/heads) with 62 layers (the 27B), else
// 1/√head_dim (read into attention_scale, required of a model written as gemma3).
double gemma3_attention_scale(const ModelConfig& c);
// The Split regex of a tokenizer.ggml.pre name ("llama-bpe", "llama3", "qwen2"); nullptr for another.
const char* gguf_split_regex(std::string_view pre);

}  // namespace attend::formats

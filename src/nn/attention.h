// Multi-head attention as a layer (000 §6.1, 001 §9-10, 002 §2-4): projections W_Q, W_K, W_V, W_O around
// the attention kernels, for MHA, GQA and MQA (n_kv_heads), self- and cross-attention, every positional
// scheme that acts inside attention, attention dropout, and the inference step over sessions' KV caches.
//
//   out = Concat(head_1, …, head_H) W_Oᵀ + b_O,   head_h = softmax(q_h k_{g(h)}ᵀ·scale + bias + mask) v_{g(h)}
//
// Parameters follow PyTorch's nn.MultiheadAttention where it has them: self-attention keeps W_Q, W_K, W_V
// fused in one (H + 2·Hkv)·d_head × d_model matrix ("qkv", rows q then k then v, like in_proj_weight), so
// one GEMM projects all three; cross-attention has "q" and a fused "kv".
#pragma once

#include "kernels/attention.h"
#include "kernels/position.h"
#include "nn/lora.h"

#include <attend/model.h>
#include <attend/parameter.h>
#include <attend/rng.h>
#include <attend/tensor.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attend::nn {

class KVCache;

// One sequence's part of an inference step over sessions: `rows` new tokens at positions
// [position, position + rows), whose keys and values are appended to `cache` (every layer's). Cross-attention
// reads the sequence's encoder output, projected once per decoder block (Session does it when it starts).
struct CachedSequence {
  KVCache* cache = nullptr;
  int64_t position = 0;
  int64_t rows = 0;
  const std::vector<Tensor>* context_keys = nullptr;    // per decoder block: (1, T_src, n_kv_heads, d_head)
  const std::vector<Tensor>* context_values = nullptr;
};

// Positional schemes applied inside attention; learned and sinusoidal encodings live at the embedding.
enum class PositionScheme { None, RoPE, ALiBi, T5 };
const char* position_scheme_name(PositionScheme s);
PositionScheme parse_position_scheme(std::string_view name);  // none, rope, alibi, t5


struct AttentionConfig {
  int64_t d_model = 512;       // e.g. 768
  int64_t n_heads = 8;         // e.g. 12
  int64_t n_kv_heads = 0;      // 0 means n_heads (MHA); 1 is MQA; a divisor of n_heads is GQA
  int64_t head_dim = 0;        // channels per head; 0 means d_model / n_heads
  bool bias = true;            // biases on the projections: GPT-2 and BERT yes, LLaMA and T5 no
  bool qkv_bias = false;       // biases on q, k, v only (Qwen2), when `bias` is off
  bool qk_norm = false;        // RMSNorm over each head's q and k, one gain of d_head each (Qwen3)
  double norm_eps = 1e-6;      // the q/k norms' ε
  bool norm_unit_offset = false;  // the q/k norms multiply by 1 + γ (Gemma)
  bool causal = false;         // decoder self-attention
  int64_t window = 0;          // causal: each query sees only the newest `window` keys, itself included; 0: all
  bool cross = false;          // keys and values from another sequence (the encoder's output)
  double scale = 0.0;          // score scale; 0 means 1/√d_head (T5 uses 1)
  PositionScheme position = PositionScheme::None;
  kernels::RopeScaling rope;   // base, base scaling, NTK factor, position interpolation
  int32_t t5_num_buckets = 32;
  int32_t t5_max_distance = 128;
  float dropout = 0.0f;        // on the attention probabilities, in training only; e.g. 0.1
  AttentionKernel kernel = AttentionKernel::Flash;

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t d_head() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  // Throws attend::Error naming the field when sizes are inconsistent or options cannot be combined.
  void validate() const;
};

// What one call needs besides the activations.
struct AttentionCall {
  const int32_t* key_lengths = nullptr;  // (B): keys at or past the length are padding; nullptr = none
  const uint8_t* mask = nullptr;         // nonzero = may attend; nullptr = none
  Shape mask_shape;                      // the mask's shape, which must be [B, Tq, Tk]
  int64_t position = 0;                  // absolute position of the first query
  bool training = false;                 // enables dropout
  Rng* rng = nullptr;                    // dropout's stream, required when training with dropout > 0
  Precision precision = Precision::F32;  // of the projections (mixed precision needs a Saved)
};

class MultiHeadAttention {
 public:
  // What forward keeps for backward.
  struct Saved {
    int64_t B = 0, Tq = 0, Tk = 0, position = 0;
    const int32_t* key_lengths = nullptr;  // the caller's arrays, which must outlive the backward
    const uint8_t* mask = nullptr;
    float dropout = 0.0f;
    uint64_t dropout_seed = 0, dropout_offset = 0;
    Precision precision = Precision::F32;
    std::vector<uint16_t> w_in_rounded, w_kv_rounded, w_out_rounded;  // mixed precision: qkv (or q), kv, o
    LoraStream drop_in, drop_kv, drop_out;  // training's adapter dropout on qkv (or q), kv, o
    Tensor x, context;  // the inputs (copies: the caller may reuse its buffers)
    Tensor q, k, v;     // (B, Tq, H, d_head), (B, Tk, Hkv, d_head): after RoPE
    Tensor attn;        // (B, Tq, H, d_head): the heads before W_O
    Tensor stats;       // flash: (B, H, Tq) log-sum-exp; reference: (B, H, Tq, Tk) probabilities
    Tensor q_raw, k_raw, q_rstd, k_rstd;  // qk_norm: q and k before their norms, and the norms' 1/rms
  };

  MultiHeadAttention(std::string name, const AttentionConfig& config);

  const AttentionConfig& config() const { return config_; }
  std::vector<Parameter*> parameters();  // each weight followed by its LoRA adapters
  // LoRA on the projections config.targets names (q, k, v: rows of the fused matrices; o).
  void add_lora(const LoraConfig& config);
  void merge_lora() { lora_.merge(); }

  // x (B, Tq, d_model) → (B, Tq, d_model). Cross-attention also takes context (B, Tk, d_model). Keeps what
  // backward needs in *saved (nullptr: nothing kept).
  Tensor forward(const Tensor& x, const Tensor* context, const AttentionCall& call, Saved* saved) const;

  // dout (B, Tq, d_model) → dx; adds into every parameter's grad. Cross-attention sets *dcontext to the
  // gradient of the context (B, Tk, d_model).
  Tensor backward(const Tensor& dout, const Saved& saved, Tensor* dcontext);

  // Inference over sessions: x (N, d_model) holds each sequence's new rows in turn (N = Σ rows). Projections
  // run once over all N rows; each sequence attends to its own cache (self-attention, `layer` of it) or to its
  // own projected encoder output (cross-attention, entry `layer`). A sequence's rows come out as they would
  // if it were stepped alone. Returns (N, d_model).
  Tensor step(const Tensor& x, std::span<const CachedSequence> sequences, int64_t layer) const;

  // Cross-attention: context (B, Tk, d_model) → keys and values (B, Tk, Hkv, d_head), as step() reads them.
  void project_context(const Tensor& context, Tensor& k, Tensor& v) const;

  // T5 bias shared across a stack (Hugging Face's T5: block 0 computes the bias every block adds): this layer
  // drops its own table and reads `owner`'s, adding its gradient there. `owner` must outlive this layer.
  void share_t5_table(MultiHeadAttention& owner);

 private:
  // The kernels' description of a call (without a KV cache's capacity, and without dropout).
  kernels::AttentionParams<float> kernel_params(int64_t B, int64_t Tq, int64_t Tk, int64_t position,
                                                const int32_t* key_lengths, const uint8_t* mask) const;
  // project_context in `precision` (rounding W_kv into *w_rounded).
  void project_context(const Tensor& context, Tensor& k, Tensor& v, Precision precision, const LoraStream* drop,
                       std::vector<uint16_t>* w_rounded) const;

  std::string name_;
  AttentionConfig config_;
  // qkv (self) or q + kv (cross), o, and T5's relative_attention_bias (num_buckets, H).
  Parameter w_qkv_, b_qkv_, w_q_, b_q_, w_kv_, b_kv_, w_o_, b_o_, t5_table_;
  Parameter q_norm_, k_norm_;  // qk_norm: the gains (d_head) of the per-head q and k norms
  LoraAdapters lora_;
  Parameter* t5_owner_ = nullptr;  // share_t5_table: the layer whose table this one reads
  const Parameter& t5_table() const { return t5_owner_ != nullptr ? *t5_owner_ : t5_table_; }
  Parameter& t5_table() { return t5_owner_ != nullptr ? *t5_owner_ : t5_table_; }
  std::vector<double> alibi_slopes_;
};

}  // namespace attend::nn

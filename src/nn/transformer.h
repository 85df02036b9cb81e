// The block and the stacks of blocks, and Model::Impl: embeddings, encoder and/or decoder, heads and
// loss for the three architectures (000 §7, 001 §6-8, §12).
//
//   pre-LN:   x ← x + α·drop(Attn(norm₁(x)));  [x ← x + α·drop(Cross(norm_c(x), enc))];  x ← x + α·drop(FFN(norm₂(x)))
//   post-LN:  x ← norm₁(x + α·drop(Attn(x)));  [x ← norm_c(x + α·drop(Cross(x, enc)))];  x ← norm₂(x + α·drop(FFN(x)))
//   sandwich: pre-LN with each branch normalised again before it is added, x ← x + α·drop(norm'(F(norm(x))))
//             (Gemma 2 and 3's post_attention_layernorm and post_feedforward_layernorm)
//
// Activations flow as rows (B·T, C); attention sees them as (B, T, C).
#pragma once

#include "nn/attention.h"
#include "nn/kv_cache.h"
#include "nn/layers.h"

#include <attend/model.h>
#include <attend/session.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace attend::nn {

// What a stack's forward needs besides its input rows.
struct StackCall {
  int64_t B = 0, T = 0;
  const int32_t* lengths = nullptr;          // (B): keys at or past a sequence's length are padding
  const uint8_t* valid = nullptr;            // (B·T): real tokens (MoE routes only these)
  const Tensor* context = nullptr;           // cross-attention: the encoder's output (B, T_src, C)
  const int32_t* context_lengths = nullptr;  // (B)
  bool training = false;
  Rng* rng = nullptr;
  Precision precision = Precision::F32;      // of the matmuls (mixed precision needs Saved states)
};

class Block {
 public:
  // One residual sub-layer's saved state.
  struct SublayerSaved {
    Norm::Saved norm;
    Dropout::Saved dropout;
    Norm::Saved post_norm;
  };
  struct Saved {
    int64_t B = 0, T = 0;
    SublayerSaved attn_sub, cross_sub, ffn_sub;
    MultiHeadAttention::Saved attn, cross;
    FeedForward::Saved ffn;
    MixtureOfExperts::Saved moe;
  };

  Block(const std::string& name, const ModelConfig& config, bool causal, bool cross, bool moe, int64_t index);

  Tensor forward(const Tensor& x, const StackCall& call, Saved* saved) const;  // (B·T, C) → (B·T, C)
  // Inference over sessions (MultiHeadAttention::step): x (N, C) holds each sequence's new rows in turn.
  Tensor step(const Tensor& x, std::span<const CachedSequence> sequences) const;
  // Sets *dcontext (B, T_src, C) to the cross-attention context's gradient, or adds into it, when there is one.
  Tensor backward(Tensor dout, double daux, Tensor* dcontext, const Saved& saved);
  void collect(std::vector<Parameter*>& out);
  double aux(const Saved& saved) const { return moe_ ? saved.moe.aux : 0.0; }
  void add_lora(const LoraConfig& config);
  void merge_lora();
  const MixtureOfExperts* moe() const { return moe_ ? &*moe_ : nullptr; }
  const MultiHeadAttention* cross_attention() const { return cross_ ? &*cross_ : nullptr; }
  MultiHeadAttention& self_attention() { return attn_; }

 private:
  // One residual sub-layer around F, pre- or post-LN. F maps rows to rows.
  struct Sublayer {
    Norm norm;
    Dropout dropout;
    std::optional<Norm> post_norm;  // sandwich_norm: norm' of the branch's output
  };
  static Sublayer sublayer(const std::string& prefix, const ModelConfig& c);  // prefix_norm (+ prefix_post_norm)
  template <typename F>
  Tensor sublayer_forward(const Sublayer& s, const Tensor& x, F&& f, bool training, Rng* rng,
                          SublayerSaved* saved) const;
  template <typename F>
  Tensor sublayer_backward(Sublayer& s, Tensor dout, F&& f_backward, const SublayerSaved& saved);

  Tensor attention_forward(const MultiHeadAttention& attn, Tensor x, const StackCall& call,
                           MultiHeadAttention::Saved* saved) const;

  bool pre_norm_ = true;
  float alpha_ = 1.0f;
  int64_t index_ = 0;  // the block's layer in a KV cache
  Sublayer attn_sub_, cross_sub_, ffn_sub_;
  MultiHeadAttention attn_;
  std::optional<MultiHeadAttention> cross_;
  std::optional<FeedForward> ffn_;
  std::optional<MixtureOfExperts> moe_;
};

class Stack {
 public:
  struct Saved {
    std::vector<Block::Saved> blocks;
    Norm::Saved final_norm;
  };

  Stack(const std::string& name, const ModelConfig& config, int64_t n_blocks, bool causal, bool cross);

  Tensor forward(const Tensor& x, const StackCall& call, Saved* saved) const;  // blocks, then the final norm (pre-LN)
  Tensor step(const Tensor& x, std::span<const CachedSequence> sequences) const;
  // after_block(i) is called once block i's backward is done (blocks from the last to the first).
  Tensor backward(const Tensor& dout, double daux, Tensor* dcontext, const Saved& saved,
                  const std::function<void(size_t)>& after_block = {});
  void collect(std::vector<Parameter*>& out);
  // Block i's first parameter in collect's order (its parameters follow it without a gap).
  const Parameter& first_parameter(size_t block) const;
  void add_lora(const LoraConfig& config);
  void merge_lora();
  double aux(const Saved& saved) const;
  void moe_stats(const Saved& saved, std::vector<MoEStats>& out) const;
  // Sessions of encoder-decoder models: every block's cross-attention keys and values of the encoder output
  // context (1, T_src, C), projected once.
  void project_context(const Tensor& context, std::vector<Tensor>& keys, std::vector<Tensor>& values) const;

 private:
  std::vector<std::unique_ptr<Block>> blocks_;
  std::optional<Norm> final_norm_;
};

// Checks one (B, T) id field of a batch (ids in the vocabulary, T within the context, lengths in [1, T]) and
// returns the lengths, filled in when the batch gave none. Errors name the field: "batch: src_ids[1][4] = ...".
std::vector<int32_t> check_sequences(const std::vector<int32_t>& ids, const std::vector<int32_t>& lengths, int64_t B,
                                     int64_t T, const char* ids_name, const char* lengths_name, const ModelConfig& c);
// (B·T) 1 where t < lengths[b], else 0.
std::vector<uint8_t> valid_mask(const std::vector<int32_t>& lengths, int64_t B, int64_t T);

// Embedding of one input sequence batch, with what its backward needs.
struct Embedded {
  std::vector<int32_t> ids, types;  // types: segment ids when the model has a type table (empty: all 0)
  int64_t B = 0, T = 0;
  Norm::Saved norm;                 // embedding_norm
  Dropout::Saved dropout;
};

}  // namespace attend::nn

namespace attend {

// The network: weights only. Everything a forward keeps lives in a ForwardState, everything a session keeps
// in its Session::State, so one Impl serves many at once.
struct Model::Impl {
  explicit Impl(const ModelConfig& config);
  ModelConfig config;
  Parameter tokens, positions;  // embed.tokens (V, C); embed.positions (max_seq_len, C) when learned
  Parameter token_types;        // embed.token_types (type_vocab_size, C)
  std::optional<nn::Norm> embed_norm;  // embed.norm (embedding_norm)
  Tensor sinusoid;              // (max_seq_len, C) when sinusoidal
  nn::Dropout embedding_dropout;
  std::unique_ptr<nn::Stack> encoder, decoder;
  Parameter lm_head;            // (V, C) when not tied
  nn::Linear mlm_dense;         // encoder MLM head
  std::optional<nn::Norm> mlm_norm;
  Parameter mlm_bias;
  nn::Linear pooler;            // classification's tanh(dense(·)) (config.pooler)
  nn::Linear classifier;        // encoder with n_classes > 0
  std::vector<Parameter*> params;
  std::vector<std::string> adapters;  // LoRA adapter sets by slot (Model::adapters): "" for the model's own
  // Every parameter's value and gradient in one buffer each (llm.c's layout, and model.safetensors' data as
  // save_model writes it): params[i] borrows the slice after the previous one's, without gaps; a matrix held
  // only as quantized blocks has no slice. The values are `values`, or a private mapping of the weights file
  // that `mapping` keeps alive (adopt_parameter_buffer). The gradients are allocated on first use
  // (ensure_gradients): running a model never touches them.
  Tensor values, grads;
  bool gradients_laid_out = false;  // grads holds every unfrozen parameter's gradient (ensure_gradients)
  std::shared_ptr<const void> mapping;
  std::vector<int64_t> offsets;  // params[i]'s slice starts at offsets[i]; -1 for one without values
  // Lays every parameter's value out in `values` (zero; norm gains 1), except those blocks_only picks, which
  // stay without values. Model's constructors do this once the layers are built.
  void lay_out(const std::function<bool(const Parameter&)>& blocks_only);
  // Lays the values out again: a quantized parameter that blocks_only picks loses its values, every other
  // keeps them (or gets its blocks' values). The gradients go.
  void relay_out(const std::function<bool(const Parameter&)>& blocks_only);
  void ensure_gradients();
  // params from the layers, in the model's order (the constructor; again when adapters come or go).
  void collect_parameters();
  // The model's own forward state, for Model::forward(batch) and Model::backward(scale).
  std::unique_ptr<ForwardState> own_state;

  // e = E[ids]·(√C if scaled) + P[position..position + T) + S[types], normed when embedding_norm, then dropout
  // (000 §8.2, 001 §6). `types` (B·T, or empty for all 0) only with a type table.
  Tensor embed(nn::Embedded* e, const std::vector<int32_t>& ids, const std::vector<int32_t>& types, int64_t B,
               int64_t T, bool training, Rng* rng) const;
  void embed_backward(const nn::Embedded& e, Tensor& dx);
  // E[ids]·(√C if scaled), one row per id; the table positions are added from (learned or sinusoidal), if any.
  Tensor lookup(const std::vector<int32_t>& ids) const;
  const float* position_table() const;
  // Sessions: N rows of ids, row i at position positions[i].
  Tensor embed_rows(const std::vector<int32_t>& ids, const std::vector<int64_t>& positions) const;
  const Parameter& output_matrix() const { return config.tie_embeddings ? tokens : lm_head; }
  Parameter& output_matrix() { return config.tie_embeddings ? tokens : lm_head; }
};

// What Model::forward keeps for Model::backward.
struct ForwardState::Impl {
  bool for_backward = true;  // keep the activations backward needs (ForwardState's constructor)
  enum class Head { None, LM, MLM, Classify } head = Head::None;
  nn::Embedded enc_embed, dec_embed;
  std::vector<uint8_t> enc_valid, dec_valid;
  nn::Stack::Saved encoder, decoder;
  Tensor enc_out;                     // (B, T_src, C)
  Tensor head_in;                     // LM: the top rows (N, C); MLM: the gathered rows; classify: pooled (B, C)
  nn::Linear::Saved mlm_dense, pooler, classifier;
  Tensor pooled;                      // classification with a pooler: tanh(dense(pooled)), the classifier's input
  nn::Norm::Saved mlm_norm;
  Tensor mlm_hidden, mlm_act;         // MLM: dense output before and after GELU
  Precision precision = Precision::F32;  // of the matmuls (RunOptions::precision)
  std::vector<uint16_t> head_rounded;    // mixed precision: the LM/MLM head's output matrix, rounded
  std::vector<int64_t> head_rows;     // MLM: rows with a target
  std::vector<int32_t> head_targets;  // per logits row, Batch::kIgnore for none
  Tensor logits, lse;
  int64_t n_targets = 0;
  float label_smoothing = 0.0f;
  int64_t B = 0, T = 0, src_T = 0;
  std::vector<int32_t> lengths;       // (B) the decoder's (or encoder-only model's) sequence lengths
  std::vector<int32_t> src_lengths;   // (B) the encoder's; attention keeps pointers to both for backward
  bool has_loss = false;
};

}  // namespace attend

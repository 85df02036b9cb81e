// The block and the stacks of blocks, and Model::Impl: embeddings, encoder and/or decoder, heads and
// loss for the three architectures (000 §7, 001 §6-8, §12).
//
//   pre-LN:   x ← x + α·drop(Attn(norm₁(x)));  [x ← x + α·drop(Cross(norm_c(x), enc))];  x ← x + α·drop(FFN(norm₂(x)))
//   post-LN:  x ← norm₁(x + α·drop(Attn(x)));  [x ← norm_c(x + α·drop(Cross(x, enc)))];  x ← norm₂(x + α·drop(FFN(x)))
//
// Activations flow as rows (B·T, C); attention sees them as (B, T, C).
#pragma once

#include "nn/attention.h"
#include "nn/kv_cache.h"
#include "nn/layers.h"

#include <attend/model.h>

#include <memory>
#include <optional>
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
  KVCache* cache = nullptr;                 // decoding: keys/values are appended at `position`
  int64_t position = 0;                      // absolute position of the first row of each sequence
  const uint8_t* mask = nullptr;             // (B, T, position + T): self-attention keys allowed (left padding)
};

class Block {
 public:
  Block(const std::string& name, const ModelConfig& config, bool causal, bool cross, bool moe, int64_t index);

  Tensor forward(const Tensor& x, const StackCall& call);  // (B·T, C) → (B·T, C)
  // Adds the gradient of the cross-attention context into *dcontext (B, T_src, C) when there is one.
  Tensor backward(Tensor dout, double daux, Tensor* dcontext);
  void collect(std::vector<Parameter*>& out);
  double aux() const { return moe_ ? moe_->aux() : 0.0; }
  const MixtureOfExperts* moe() const { return moe_ ? &*moe_ : nullptr; }
  // Generation: cross-attention keys and values of the encoder output, projected once.
  void cache_context(const Tensor& context) {
    if (cross_) cross_->cache_context(context);
  }

 private:
  // One residual sub-layer around F, pre- or post-LN. F maps rows to rows.
  struct Sublayer {
    Norm norm;
    Dropout dropout;
  };
  template <typename F>
  Tensor sublayer_forward(Sublayer& s, const Tensor& x, F&& f, const StackCall& call);
  template <typename F>
  Tensor sublayer_backward(Sublayer& s, Tensor dout, F&& f_backward);

  Tensor attention_forward(MultiHeadAttention& attn, Tensor x, const StackCall& call);

  bool pre_norm_ = true;
  float alpha_ = 1.0f;
  int64_t index_ = 0;  // the block's layer in the KV cache
  Sublayer attn_sub_, cross_sub_, ffn_sub_;
  MultiHeadAttention attn_;
  std::optional<MultiHeadAttention> cross_;
  std::optional<FeedForward> ffn_;
  std::optional<MixtureOfExperts> moe_;
  int64_t B_ = 0, T_ = 0;
};

class Stack {
 public:
  Stack(const std::string& name, const ModelConfig& config, int64_t n_blocks, bool causal, bool cross);

  Tensor forward(const Tensor& x, const StackCall& call);  // blocks, then the final norm (pre-LN)
  Tensor backward(const Tensor& dout, double daux, Tensor* dcontext);
  void collect(std::vector<Parameter*>& out);
  double aux() const;
  void moe_stats(std::vector<MoEStats>& out) const;
  void cache_context(const Tensor& context) {
    for (auto& block : blocks_) block->cache_context(context);
  }

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

}  // namespace attend::nn

namespace attend {

struct Model::Impl {
  explicit Impl(const ModelConfig& config);
  // Mixed precision: the weights' rounded copies are out of date (a forward or decoding starts).
  void mark_rounded_stale();

  ModelConfig config;
  Precision precision = Precision::F32;  // of the matmuls (Model::set_precision)
  Parameter tokens, positions;  // embed.tokens (V, C); embed.positions (max_seq_len, C) when learned
  Tensor sinusoid;              // (max_seq_len, C) when sinusoidal
  std::unique_ptr<nn::Stack> encoder, decoder;
  Parameter lm_head;            // (V, C) when not tied
  nn::Linear mlm_dense;         // encoder MLM head
  std::optional<nn::Norm> mlm_norm;
  Parameter mlm_bias;
  nn::Linear classifier;        // encoder with n_classes > 0
  std::vector<Parameter*> params;
  // Every parameter's value and gradient in one buffer each (llm.c's layout): each params[i] borrows its
  // slice, which starts on a 64-byte boundary; the gaps between slices stay zero.
  Tensor values, grads;
  void gather_parameters();  // the constructor's last step: moves each parameter into the buffers

  // Embedding of one input sequence batch, with what its backward needs.
  struct Embedded {
    const std::vector<int32_t>* ids = nullptr;
    int64_t B = 0, T = 0;
    nn::Dropout dropout;
  };
  // Rows of sequence b take positions position − shift[b], position − shift[b] + 1, ... (clamped at 0): left
  // padding of shift[b] tokens leaves the real tokens at 0, 1, ... as without it.
  Tensor embed(Embedded& e, const std::vector<int32_t>& ids, int64_t B, int64_t T, bool training, Rng* rng,
               int64_t position = 0, const std::vector<int32_t>* shift = nullptr);
  void embed_backward(Embedded& e, Tensor& dx);
  Parameter& output_matrix() { return config.tie_embeddings ? tokens : lm_head; }

  // Saved by forward for backward.
  enum class Head { None, LM, MLM, Classify } head = Head::None;
  Embedded enc_embed, dec_embed;
  std::vector<uint8_t> enc_valid, dec_valid;
  Tensor enc_out;                     // (B, T_src, C)
  Tensor head_in;                     // LM: the top rows (N, C); MLM: the gathered rows; classify: pooled (B, C)
  Tensor mlm_hidden, mlm_act;         // MLM: dense output before and after GELU
  std::vector<int64_t> head_rows;     // MLM: rows with a target
  std::vector<int32_t> head_targets;  // per logits row, Batch::kIgnore for none
  Tensor logits, lse;
  int64_t n_targets = 0;
  float label_smoothing = 0.0f;
  int64_t B = 0, T = 0, src_T = 0;
  std::unique_ptr<nn::KVCache> cache;  // generation
  CacheType cache_type = CacheType::F32;  // the storage start_decoding gives it
  int64_t decode_position = 0;
  std::vector<int32_t> left_pad;          // generation of prompts of different lengths: pad tokens per sequence
  Tensor next_logits;                     // (batch, V) of the last decode call
  std::vector<int32_t> lengths;       // (B) the decoder's (or encoder-only model's) sequence lengths
  std::vector<int32_t> src_lengths;   // (B) the encoder's; attention keeps pointers to both for backward
  bool has_loss = false;
};

}  // namespace attend

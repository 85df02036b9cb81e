#include "nn/attention.h"
#include "nn/layers.h"

#include "nn/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "core/enum_names.h"

#include <attend/error.h>

#include <cmath>
#include <cstring>

namespace attend::nn {
namespace {

// Copies columns [col, col + width) of every row of src (rows × src_width) into dst (rows × width), and
// back: splitting a fused projection into q, k, v and joining their gradients.
void split_columns(float* dst, const float* src, int64_t rows, int64_t src_width, int64_t col, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * width, src + r * src_width + col, width * sizeof(float));
}
void join_columns(float* dst, const float* src, int64_t rows, int64_t dst_width, int64_t col, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_width + col, src + r * width, width * sizeof(float));
}

struct RopeTables {
  std::vector<float> cos, sin;
  RopeTables(int64_t start, int64_t T, int64_t d_head, const kernels::RopeScaling& scaling)
      : cos(T * d_head / 2), sin(T * d_head / 2) {
    kernels::rope_tables(cos.data(), sin.data(), start, T, d_head, scaling);
  }
};

bool has(const Parameter& p) { return p.value.numel() > 0; }
const float* data_or_null(const Parameter& p) { return has(p) ? p.value.data() : nullptr; }
float* grad_or_null(Parameter& p) { return has(p) ? p.grad.data() : nullptr; }

}  // namespace

constexpr EnumName<PositionScheme> kPositionSchemes[] = {
    {PositionScheme::None, "none"}, {PositionScheme::RoPE, "rope"}, {PositionScheme::ALiBi, "alibi"}, {PositionScheme::T5, "t5"}};

const char* position_scheme_name(PositionScheme s) { return enum_name<PositionScheme>(kPositionSchemes, s); }
PositionScheme parse_position_scheme(std::string_view name) {
  return parse_enum<PositionScheme>(kPositionSchemes, name, "attention position scheme");
}

void AttentionConfig::validate() const {
  check(d_model > 0 && n_heads > 0, "attention: d_model and n_heads must be positive, got d_model={} n_heads={}",
        d_model, n_heads);
  check(d_model % n_heads == 0, "attention: d_model {} is not divisible by n_heads {}", d_model, n_heads);
  check(n_kv_heads >= 0 && kv_heads() <= n_heads && n_heads % kv_heads() == 0,
        "attention: n_heads {} is not a multiple of n_kv_heads {} (grouped-query attention shares each key/value "
        "head among n_heads/n_kv_heads query heads)",
        n_heads, n_kv_heads);
  check(position != PositionScheme::RoPE || d_head() % 2 == 0,
        "attention: RoPE rotates pairs of channels, so d_head must be even, got d_head {} (d_model {} / n_heads {})",
        d_head(), d_model, n_heads);
  check(position != PositionScheme::RoPE || !cross,
        "attention: RoPE applies to self-attention; cross-attention keys come from another sequence");
  check(position != PositionScheme::T5 || t5_num_buckets >= 2, "attention: t5_num_buckets must be at least 2, got {}",
        t5_num_buckets);
  check(dropout >= 0.0f && dropout < 1.0f, "attention: dropout must be in [0, 1), got {}", dropout);
  check(kernel != AttentionKernel::Linear || (!cross && (position == PositionScheme::None ||
                                                         position == PositionScheme::RoPE)),
        "attention: the linear kernel supports self-attention with no position bias (none or rope), got {}{}",
        position_scheme_name(position), cross ? " cross-attention" : "");
}

MultiHeadAttention::MultiHeadAttention(std::string name, const AttentionConfig& config)
    : name_(std::move(name)), config_(config) {
  config_.validate();
  const int64_t C = config_.d_model, H = config_.n_heads, Hkv = config_.kv_heads(), D = config_.d_head();
  if (!config_.cross) {
    w_qkv_ = Parameter(name_ + ".qkv.weight", {(H + 2 * Hkv) * D, C}, Role::AttentionQkv);
    if (config_.bias) b_qkv_ = Parameter(name_ + ".qkv.bias", {(H + 2 * Hkv) * D}, Role::AttentionBias);
  } else {
    w_q_ = Parameter(name_ + ".q.weight", {H * D, C}, Role::AttentionQuery);
    w_kv_ = Parameter(name_ + ".kv.weight", {2 * Hkv * D, C}, Role::AttentionKeyValue);
    if (config_.bias) {
      b_q_ = Parameter(name_ + ".q.bias", {H * D}, Role::AttentionBias);
      b_kv_ = Parameter(name_ + ".kv.bias", {2 * Hkv * D}, Role::AttentionBias);
    }
  }
  w_o_ = Parameter(name_ + ".o.weight", {C, H * D}, Role::AttentionOutput);
  if (config_.bias) b_o_ = Parameter(name_ + ".o.bias", {C}, Role::AttentionBias);
  if (config_.position == PositionScheme::T5)
    t5_table_ = Parameter(name_ + ".relative_attention_bias", {config_.t5_num_buckets, H}, Role::RelativePositionBias);
  if (config_.position == PositionScheme::ALiBi) {
    alibi_slopes_.resize(H);
    kernels::alibi_slopes(alibi_slopes_.data(), H);
  }
}

std::vector<Parameter*> MultiHeadAttention::parameters() {
  std::vector<Parameter*> all;
  for (Parameter* p : {&w_qkv_, &b_qkv_, &w_q_, &b_q_, &w_kv_, &b_kv_, &w_o_, &b_o_, &t5_table_})
    if (has(*p)) all.push_back(p);
  return all;
}

kernels::AttentionParams<float> MultiHeadAttention::kernel_params() const {
  const auto& c = config_;
  const auto& s = saved_;
  kernels::AttentionParams<float> p;
  p.B = s.B, p.Tq = s.Tq, p.Tk = s.Tk, p.n_heads = c.n_heads, p.n_kv_heads = c.kv_heads(), p.d_head = c.d_head();
  p.scale = c.scale > 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d_head()));
  p.causal = c.causal && !c.cross;
  p.q_offset = c.cross ? 0 : s.position;
  p.key_lengths = s.key_lengths, p.mask = s.mask;
  p.alibi_slopes = alibi_slopes_.empty() ? nullptr : alibi_slopes_.data();
  p.t5_table = data_or_null(t5_table_);
  p.t5_num_buckets = c.t5_num_buckets, p.t5_max_distance = c.t5_max_distance, p.t5_bidirectional = !p.causal;
  p.dropout = s.dropout, p.dropout_seed = s.dropout_seed, p.dropout_offset = s.dropout_offset;
  return p;
}

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor* context, const AttentionCall& call) {
  const auto& c = config_;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  check(x.rank() == 3 && x.size(2) == C, "attention '{}': input has shape {}, expected [batch, time, {}]", name_,
        x.shape(), C);
  const int64_t B = x.size(0), Tq = x.size(1);
  int64_t Tk = Tq;
  const bool cached_context = c.cross && context == nullptr;
  if (cached_context) {
    check(context_k_.numel() > 0,
          "attention '{}': cross-attention needs a context (the encoder output), or cache_context() first", name_);
    check(context_k_.size(0) == B, "attention '{}': the cached context holds batch {}, the queries batch {}", name_,
          context_k_.size(0), B);
    Tk = context_k_.size(1);
  } else if (c.cross) {
    check(context->rank() == 3 && context->size(0) == B && context->size(2) == C,
          "attention '{}': queries have shape {} and context has shape {}, expected context [{}, time, {}]", name_,
          x.shape(), context->shape(), B, C);
    Tk = context->size(1);
  } else {
    check(context == nullptr, "attention '{}': self-attention takes no context", name_);
  }
  check(call.position >= 0, "attention '{}': position must be non-negative, got {}", name_, call.position);
  if (call.cache != nullptr) {
    const auto& cc = call.cache->config();
    check(!c.cross && c.kernel != AttentionKernel::Linear,
          "attention '{}': the KV cache serves softmax self-attention", name_);
    check(cc.n_kv_heads == Hkv && cc.d_head == D && cc.batch == B,
          "attention '{}': KV cache holds batch {} × {} heads × {} channels, the layer needs batch {} × {} × {}", name_,
          cc.batch, cc.n_kv_heads, cc.d_head, B, Hkv, D);
    Tk = call.position + Tq;
  } else {
    check(call.position == 0 || c.kernel != AttentionKernel::Linear,
          "attention '{}': the linear kernel starts at position 0", name_);
  }
  if (call.mask != nullptr)
    check(call.mask_shape == Shape({B, Tq, Tk}), "attention '{}': mask has shape {}, expected [batch, queries, keys] = {}",
          name_, call.mask_shape, Shape({B, Tq, Tk}));
  if (call.key_lengths != nullptr)
    for (int64_t b = 0; b < B; ++b)
      check(call.key_lengths[b] >= 0 && call.key_lengths[b] <= Tk,
            "attention '{}': key length {} of sequence {} is outside [0, {}]", name_, call.key_lengths[b], b, Tk);
  const bool dropout = call.training && c.dropout > 0.0f;
  check(!dropout || call.rng != nullptr, "attention '{}': training with dropout needs an Rng", name_);

  saved_ = Saved{B, Tq, Tk, call.position, call.key_lengths, call.mask, dropout ? c.dropout : 0.0f, 0, 0,
                 call.cache != nullptr || cached_context};
  if (dropout) {
    saved_.dropout_seed = call.rng->seed();
    saved_.dropout_offset = call.rng->reserve(static_cast<uint64_t>(B * H * Tq * Tk));
  }
  x_ = saved_.used_cache ? Tensor() : x.clone();  // backward's input; generation has no backward
  const int64_t Tkv = c.cross ? Tk : Tq;  // rows projected to keys/values in this call
  q_ = Tensor({B, Tq, H, D});
  k_ = cached_context ? Tensor() : Tensor({B, Tkv, Hkv, D});
  v_ = cached_context ? Tensor() : Tensor({B, Tkv, Hkv, D});
  if (!c.cross) {
    const int64_t W = (H + 2 * Hkv) * D;
    std::vector<float> qkv(B * Tq * W);
    linear_forward(qkv.data(), x.data(), w_qkv_, data_or_null(b_qkv_), B * Tq, C, W);
    split_columns(q_.data(), qkv.data(), B * Tq, W, 0, H * D);
    split_columns(k_.data(), qkv.data(), B * Tq, W, H * D, Hkv * D);
    split_columns(v_.data(), qkv.data(), B * Tq, W, (H + Hkv) * D, Hkv * D);
  } else {
    linear_forward(q_.data(), x.data(), w_q_, data_or_null(b_q_), B * Tq, C, H * D);
    if (!cached_context) {
      context_ = context->clone();
      project_context(*context, k_, v_);
    }
  }
  if (c.position == PositionScheme::RoPE) {
    RopeTables rope(call.position, Tq, D, c.rope);
    kernels::rope_forward(q_.data(), q_.data(), rope.cos.data(), rope.sin.data(), B, Tq, H, D);
    kernels::rope_forward(k_.data(), k_.data(), rope.cos.data(), rope.sin.data(), B, Tq, Hkv, D);
  }

  kernels::AttentionParams<float> p = kernel_params();
  attn_ = Tensor({B, Tq, H, D});
  const float* keys = cached_context ? context_k_.data() : k_.data();
  const float* values = cached_context ? context_v_.data() : v_.data();
  // A generated token (one query per sequence, no backward) takes the decode kernel, which reads the KV
  // cache as stored; longer inputs take the tiled kernel over fp32 rows.
  const bool decode_step = (call.cache != nullptr || cached_context) && Tq == 1 && !dropout &&
                           c.kernel == AttentionKernel::Flash;
  if (call.cache != nullptr) {
    call.cache->write(call.cache_layer, call.position, k_.data(), v_.data(), Tq);
    if (!decode_step) {
      keys = call.cache->keys(call.cache_layer, Tk);
      values = call.cache->values(call.cache_layer, Tk);
      p.kv_capacity = call.cache->config().max_T;
    }
  }

  const int threads = kernels::num_threads();
  if (decode_step && call.cache != nullptr) {
    call.cache->attend(call.cache_layer, attn_.data(), q_.data(), p);
  } else if (decode_step) {  // cross-attention over the cached encoder output
    std::vector<float> workspace(kernels::decode_attention_workspace_size(p, threads));
    kernels::decode_attention_forward(attn_.data(), q_.data(), keys, values, nullptr, nullptr, p, workspace.data());
  } else {
    switch (c.kernel) {
      case AttentionKernel::Flash: {
        stats_ = Tensor({B, H, Tq});
        std::vector<float> workspace(kernels::flash_attention_workspace_size(p, threads));
        kernels::flash_attention_forward(attn_.data(), stats_.data(), q_.data(), keys, values, p, workspace.data());
        break;
      }
      case AttentionKernel::Reference:
        stats_ = Tensor({B, H, Tq, Tk});
        kernels::attention_reference_forward(attn_.data(), stats_.data(), q_.data(), keys, values, p);
        break;
      case AttentionKernel::Linear: {
        std::vector<float> workspace(kernels::linear_attention_workspace_size(p, threads));
        kernels::linear_attention_forward(attn_.data(), q_.data(), keys, values, p, workspace.data());
        break;
      }
    }
  }
  Tensor out = Tensor::uninitialized({B, Tq, C});
  linear_forward(out.data(), attn_.data(), w_o_, data_or_null(b_o_), B * Tq, H * D, C);
  return out;
}

void MultiHeadAttention::project_context(const Tensor& context, Tensor& k, Tensor& v) const {
  const int64_t C = config_.d_model, Hkv = config_.kv_heads(), D = config_.d_head();
  const int64_t B = context.size(0), Tk = context.size(1);
  std::vector<float> kv(B * Tk * 2 * Hkv * D);
  linear_forward(kv.data(), context.data(), w_kv_, data_or_null(b_kv_), B * Tk, C, 2 * Hkv * D);
  k = Tensor({B, Tk, Hkv, D});
  v = Tensor({B, Tk, Hkv, D});
  split_columns(k.data(), kv.data(), B * Tk, 2 * Hkv * D, 0, Hkv * D);
  split_columns(v.data(), kv.data(), B * Tk, 2 * Hkv * D, Hkv * D, Hkv * D);
}

void MultiHeadAttention::cache_context(const Tensor& context) {
  check(config_.cross, "attention '{}': only cross-attention has a context to cache", name_);
  check(context.rank() == 3 && context.size(2) == config_.d_model,
        "attention '{}': context has shape {}, expected [batch, time, {}]", name_, context.shape(), config_.d_model);
  project_context(context, context_k_, context_v_);
}

Tensor MultiHeadAttention::backward(const Tensor& dout) {
  const auto& c = config_;
  const auto& s = saved_;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  check(!s.used_cache, "attention '{}': backward after a forward through the KV cache (generation has no backward)",
        name_);
  check(dout.size(-1) == C && dout.numel() == s.B * s.Tq * C,
        "attention '{}': output gradient has shape {}, forward produced {} (or its rows, {})", name_, dout.shape(),
        Shape({s.B, s.Tq, C}), Shape({s.B * s.Tq, C}));
  // out = attn · W_Oᵀ + b_O
  Tensor dattn({s.B, s.Tq, H, D});
  linear_backward(dattn.data(), w_o_, grad_or_null(b_o_), dout.data(), attn_.data(), s.B * s.Tq, H * D, C);

  const kernels::AttentionParams<float> p = kernel_params();
  Tensor dq(q_.shape()), dk(k_.shape()), dv(v_.shape());
  const int threads = kernels::num_threads();
  switch (c.kernel) {
    case AttentionKernel::Flash: {
      std::vector<float> workspace(kernels::flash_attention_workspace_size(p, threads));
      kernels::flash_attention_backward(dq.data(), dk.data(), dv.data(), grad_or_null(t5_table_), dattn.data(),
                                        attn_.data(), stats_.data(), q_.data(), k_.data(), v_.data(), p,
                                        workspace.data());
      break;
    }
    case AttentionKernel::Reference:
      kernels::attention_reference_backward(dq.data(), dk.data(), dv.data(), grad_or_null(t5_table_), dattn.data(),
                                            stats_.data(), q_.data(), k_.data(), v_.data(), p);
      break;
    case AttentionKernel::Linear: {
      std::vector<float> workspace(kernels::linear_attention_workspace_size(p, threads));
      kernels::linear_attention_backward(dq.data(), dk.data(), dv.data(), dattn.data(), q_.data(), k_.data(),
                                         v_.data(), p, workspace.data());
      break;
    }
  }
  if (c.position == PositionScheme::RoPE) {  // back through the rotation: the inverse rotation
    RopeTables rope(s.position, s.Tq, D, c.rope);
    Tensor dq_in(dq.shape()), dk_in(dk.shape());
    kernels::rope_backward(dq_in.data(), dq.data(), rope.cos.data(), rope.sin.data(), s.B, s.Tq, H, D);
    kernels::rope_backward(dk_in.data(), dk.data(), rope.cos.data(), rope.sin.data(), s.B, s.Tq, Hkv, D);
    dq = std::move(dq_in);
    dk = std::move(dk_in);
  }
  Tensor dx({s.B, s.Tq, C});
  if (!c.cross) {
    const int64_t W = (H + 2 * Hkv) * D;
    std::vector<float> dqkv(s.B * s.Tq * W);
    join_columns(dqkv.data(), dq.data(), s.B * s.Tq, W, 0, H * D);
    join_columns(dqkv.data(), dk.data(), s.B * s.Tq, W, H * D, Hkv * D);
    join_columns(dqkv.data(), dv.data(), s.B * s.Tq, W, (H + Hkv) * D, Hkv * D);
    linear_backward(dx.data(), w_qkv_, grad_or_null(b_qkv_), dqkv.data(), x_.data(), s.B * s.Tq, C, W);
  } else {
    linear_backward(dx.data(), w_q_, grad_or_null(b_q_), dq.data(), x_.data(), s.B * s.Tq, C, H * D);
    std::vector<float> dkv(s.B * s.Tk * 2 * Hkv * D);
    join_columns(dkv.data(), dk.data(), s.B * s.Tk, 2 * Hkv * D, 0, Hkv * D);
    join_columns(dkv.data(), dv.data(), s.B * s.Tk, 2 * Hkv * D, Hkv * D, Hkv * D);
    dcontext_ = Tensor({s.B, s.Tk, C});
    linear_backward(dcontext_.data(), w_kv_, grad_or_null(b_kv_), dkv.data(), context_.data(), s.B * s.Tk, C,
                    2 * Hkv * D);
  }
  return dx;
}

}  // namespace attend::nn

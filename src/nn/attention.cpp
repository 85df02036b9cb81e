#include "nn/attention.h"
#include "nn/layers.h"

#include "nn/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/parallel.h"
#include "core/enum_names.h"

#include <attend/error.h>

#include <algorithm>
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

// Qwen3's q/k norm: RMSNorm over each head's d channels of `rows` rows (d each), in place; rstd (rows) and the
// input (raw, when given) are what backward needs.
void head_norm(float* x, float* rstd, Tensor* raw, const Parameter& gain, bool unit_offset, int64_t rows, int64_t d,
               double eps) {
  Tensor in = Tensor::uninitialized({rows, d});
  std::memcpy(in.data(), x, sizeof(float) * static_cast<size_t>(rows * d));
  std::vector<float> offset_gain;
  kernels::rmsnorm_forward(x, rstd, in.data(), norm_gain(gain, unit_offset, offset_gain), rows, d,
                           static_cast<float>(eps));
  if (raw != nullptr) *raw = std::move(in);
}

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
  check(head_dim > 0 || d_model % n_heads == 0, "attention: d_model {} is not divisible by n_heads {} (or set head_dim)",
        d_model, n_heads);
  check(!(qk_norm || qkv_bias) || !cross, "attention: qk_norm and qkv_bias are options of self-attention");
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
  check(window >= 0 && (window == 0 || (causal && !cross && kernel != AttentionKernel::Linear)),
        "attention: a sliding window ({}) applies to causal self-attention with the flash or reference kernel", window);
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
    if (config_.bias || config_.qkv_bias)
      b_qkv_ = Parameter(name_ + ".qkv.bias", {(H + 2 * Hkv) * D}, Role::AttentionBias);
    if (config_.qk_norm) {
      q_norm_ = Parameter(name_ + ".q_norm.weight", {D}, Role::NormGain);
      k_norm_ = Parameter(name_ + ".k_norm.weight", {D}, Role::NormGain);
      for (Parameter* gain : {&q_norm_, &k_norm_})  // a gain of 1 either way (a model's: Model's lay_out)
        if (gain->has_values()) gain->value.fill(config_.norm_unit_offset ? 0.0f : 1.0f);
    }
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

void MultiHeadAttention::share_t5_table(MultiHeadAttention& owner) {
  check(config_.position == PositionScheme::T5 && has(owner.t5_table_) && &owner != this,
        "attention '{}': only a T5-biased layer can share another's relative position table", name_);
  check(owner.t5_table_.value.shape() == Shape({config_.t5_num_buckets, config_.n_heads}),
        "attention '{}': the shared table has shape {}, this layer needs [{}, {}]", name_,
        owner.t5_table_.value.shape(), config_.t5_num_buckets, config_.n_heads);
  t5_table_ = Parameter();
  t5_owner_ = &owner.t5_table_;
}

std::vector<Parameter*> MultiHeadAttention::parameters() {
  std::vector<Parameter*> all;
  for (Parameter* p : {&w_qkv_, &b_qkv_, &q_norm_, &k_norm_, &w_q_, &b_q_, &w_kv_, &b_kv_, &w_o_, &b_o_, &t5_table_})
    if (has(*p)) {
      all.push_back(p);
      lora_.collect(*p, all);
    }
  return all;
}

void MultiHeadAttention::add_lora(const LoraConfig& lora) {
  auto wants = [&](const char* t) { return std::find(lora.targets.begin(), lora.targets.end(), t) != lora.targets.end(); };
  const int64_t q = config_.n_heads * config_.d_head(), kv = config_.kv_heads() * config_.d_head();
  if (has(w_qkv_)) {  // self-attention: rows q, then k, then v
    if (wants("q")) lora_.add(w_qkv_, "q.", 0, q, lora);
    if (wants("k")) lora_.add(w_qkv_, "k.", q, kv, lora);
    if (wants("v")) lora_.add(w_qkv_, "v.", q + kv, kv, lora);
  } else {  // cross-attention: q, and k then v in one matrix
    if (wants("q")) lora_.add(w_q_, "", 0, q, lora);
    if (wants("k")) lora_.add(w_kv_, "k.", 0, kv, lora);
    if (wants("v")) lora_.add(w_kv_, "v.", kv, kv, lora);
  }
  if (wants("o")) lora_.add(w_o_, "", 0, config_.d_model, lora);
}

kernels::AttentionParams<float> MultiHeadAttention::kernel_params(int64_t B, int64_t Tq, int64_t Tk, int64_t position,
                                                                  const int32_t* key_lengths,
                                                                  const uint8_t* mask) const {
  const auto& c = config_;
  kernels::AttentionParams<float> p;
  p.B = B, p.Tq = Tq, p.Tk = Tk, p.n_heads = c.n_heads, p.n_kv_heads = c.kv_heads(), p.d_head = c.d_head();
  p.scale = c.scale > 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d_head()));
  p.causal = c.causal && !c.cross;
  p.q_offset = c.cross ? 0 : position;
  p.window = p.causal ? c.window : 0;
  p.key_lengths = key_lengths, p.mask = mask;
  p.alibi_slopes = alibi_slopes_.empty() ? nullptr : alibi_slopes_.data();
  p.t5_table = data_or_null(t5_table());
  p.t5_num_buckets = c.t5_num_buckets, p.t5_max_distance = c.t5_max_distance, p.t5_bidirectional = !p.causal;
  return p;
}

namespace {

// Runs the configured kernel over fp32 keys and values (the tiled one for longer inputs); stats gets flash's
// log-sum-exp or the reference's probabilities, which backward reads.
void attention_kernel(AttentionKernel kernel, float* out, Tensor& stats, const float* q, const float* keys,
                      const float* values, const kernels::AttentionParams<float>& p) {
  const int threads = kernels::num_threads();
  switch (kernel) {
    case AttentionKernel::Flash: {
      stats = Tensor({p.B, p.n_heads, p.Tq});
      std::vector<float> workspace(kernels::flash_attention_workspace_size(p, threads));
      kernels::flash_attention_forward(out, stats.data(), q, keys, values, p, workspace.data());
      break;
    }
    case AttentionKernel::Reference:
      stats = Tensor({p.B, p.n_heads, p.Tq, p.Tk});
      kernels::attention_reference_forward(out, stats.data(), q, keys, values, p);
      break;
    case AttentionKernel::Linear: {
      std::vector<float> workspace(kernels::linear_attention_workspace_size(p, threads));
      kernels::linear_attention_forward(out, q, keys, values, p, workspace.data());
      break;
    }
  }
}

}  // namespace

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor* context, const AttentionCall& call,
                                   Saved* saved) const {
  const auto& c = config_;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  check(x.rank() == 3 && x.size(2) == C, "attention '{}': input has shape {}, expected [batch, time, {}]", name_,
        x.shape(), C);
  const int64_t B = x.size(0), Tq = x.size(1);
  int64_t Tk = Tq;
  if (c.cross) {
    check(context != nullptr, "attention '{}': cross-attention needs a context (the encoder output)", name_);
    check(context->rank() == 3 && context->size(0) == B && context->size(2) == C,
          "attention '{}': queries have shape {} and context has shape {}, expected context [{}, time, {}]", name_,
          x.shape(), context->shape(), B, C);
    Tk = context->size(1);
  } else {
    check(context == nullptr, "attention '{}': self-attention takes no context", name_);
  }
  check(call.position >= 0, "attention '{}': position must be non-negative, got {}", name_, call.position);
  check(call.position == 0 || c.kernel != AttentionKernel::Linear,
        "attention '{}': the linear kernel starts at position 0", name_);
  if (call.mask != nullptr)
    check(call.mask_shape == Shape({B, Tq, Tk}), "attention '{}': mask has shape {}, expected [batch, queries, keys] = {}",
          name_, call.mask_shape, Shape({B, Tq, Tk}));
  if (call.key_lengths != nullptr)
    for (int64_t b = 0; b < B; ++b)
      check(call.key_lengths[b] >= 0 && call.key_lengths[b] <= Tk,
            "attention '{}': key length {} of sequence {} is outside [0, {}]", name_, call.key_lengths[b], b, Tk);
  const bool dropout = call.training && c.dropout > 0.0f;
  check(!dropout || (call.rng != nullptr && saved != nullptr),
        "attention '{}': training with dropout needs an Rng and a saved state", name_);

  Saved scratch;  // evaluation: nothing is kept
  Saved& s = saved != nullptr ? *saved : scratch;
  check(call.precision == Precision::F32 || saved != nullptr,
        "attention '{}': mixed precision needs a forward that saves for backward", name_);
  s.precision = call.precision;
  s.B = B, s.Tq = Tq, s.Tk = Tk, s.position = call.position, s.key_lengths = call.key_lengths, s.mask = call.mask;
  s.dropout = dropout ? c.dropout : 0.0f;
  if (dropout) {
    s.dropout_seed = call.rng->seed();
    s.dropout_offset = call.rng->reserve(static_cast<uint64_t>(B * H * Tq * Tk));
  }
  const bool saving = saved != nullptr;
  if (saving) s.x = x.clone();  // backward's input
  s.drop_in = lora_dropout_stream(c.cross ? w_q_ : w_qkv_, B * Tq, call.training, call.rng);
  if (c.cross) s.drop_kv = lora_dropout_stream(w_kv_, B * Tk, call.training, call.rng);
  s.drop_out = lora_dropout_stream(w_o_, B * Tq, call.training, call.rng);
  s.q = Tensor({B, Tq, H, D});
  s.k = Tensor({B, Tk, Hkv, D});
  s.v = Tensor({B, Tk, Hkv, D});
  if (!c.cross) {
    const int64_t W = (H + 2 * Hkv) * D;
    std::vector<float> qkv(B * Tq * W);
    linear_forward(qkv.data(), x.data(), w_qkv_, data_or_null(b_qkv_), B * Tq, C, W, s.precision, &s.w_in_rounded,
                   &s.drop_in);
    split_columns(s.q.data(), qkv.data(), B * Tq, W, 0, H * D);
    split_columns(s.k.data(), qkv.data(), B * Tq, W, H * D, Hkv * D);
    split_columns(s.v.data(), qkv.data(), B * Tq, W, (H + Hkv) * D, Hkv * D);
    if (c.qk_norm) {
      s.q_rstd = Tensor::uninitialized({B * Tq * H});
      s.k_rstd = Tensor::uninitialized({B * Tq * Hkv});
      head_norm(s.q.data(), s.q_rstd.data(), saving ? &s.q_raw : nullptr, q_norm_, c.norm_unit_offset, B * Tq * H, D,
                c.norm_eps);
      head_norm(s.k.data(), s.k_rstd.data(), saving ? &s.k_raw : nullptr, k_norm_, c.norm_unit_offset, B * Tq * Hkv,
                D, c.norm_eps);
    }
  } else {
    linear_forward(s.q.data(), x.data(), w_q_, data_or_null(b_q_), B * Tq, C, H * D, s.precision, &s.w_in_rounded,
                   &s.drop_in);
    if (saving) s.context = context->clone();
    project_context(*context, s.k, s.v, s.precision, &s.drop_kv, &s.w_kv_rounded);
  }
  if (c.position == PositionScheme::RoPE) {
    RopeTables rope(call.position, Tq, D, c.rope);
    kernels::rope_forward(s.q.data(), s.q.data(), rope.cos.data(), rope.sin.data(), B, Tq, H, D);
    kernels::rope_forward(s.k.data(), s.k.data(), rope.cos.data(), rope.sin.data(), B, Tq, Hkv, D);
  }

  kernels::AttentionParams<float> p = kernel_params(B, Tq, Tk, call.position, call.key_lengths, call.mask);
  p.dropout = s.dropout, p.dropout_seed = s.dropout_seed, p.dropout_offset = s.dropout_offset;
  s.attn = Tensor({B, Tq, H, D});
  attention_kernel(c.kernel, s.attn.data(), s.stats, s.q.data(), s.k.data(), s.v.data(), p);
  Tensor out = Tensor::uninitialized({B, Tq, C});
  linear_forward(out.data(), s.attn.data(), w_o_, data_or_null(b_o_), B * Tq, H * D, C, s.precision, &s.w_out_rounded,
                 &s.drop_out);
  return out;
}

Tensor MultiHeadAttention::step(const Tensor& x, std::span<const CachedSequence> sequences, int64_t layer) const {
  const auto& c = config_;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  const int64_t N = x.numel() / C;
  check(x.numel() == N * C && N > 0, "attention '{}': step input has shape {}, expected [rows, {}]", name_, x.shape(), C);
  check(c.cross || c.kernel != AttentionKernel::Linear,
        "attention '{}': the linear kernel has no KV cache to decode with", name_);
  int64_t rows = 0;
  for (const CachedSequence& seq : sequences) rows += seq.rows;
  check(rows == N, "attention '{}': the sequences hold {} rows, the step input {}", name_, rows, N);

  // Projections over every row at once: the matmuls see all sessions' tokens together.
  Tensor q({N, H, D}), k, v;
  if (!c.cross) {
    const int64_t W = (H + 2 * Hkv) * D;
    std::vector<float> qkv(N * W);
    linear_forward(qkv.data(), x.data(), w_qkv_, data_or_null(b_qkv_), N, C, W, Precision::F32);
    k = Tensor({N, Hkv, D});
    v = Tensor({N, Hkv, D});
    split_columns(q.data(), qkv.data(), N, W, 0, H * D);
    split_columns(k.data(), qkv.data(), N, W, H * D, Hkv * D);
    split_columns(v.data(), qkv.data(), N, W, (H + Hkv) * D, Hkv * D);
    if (c.qk_norm) {
      std::vector<float> rstd(N * H);
      head_norm(q.data(), rstd.data(), nullptr, q_norm_, c.norm_unit_offset, N * H, D, c.norm_eps);
      head_norm(k.data(), rstd.data(), nullptr, k_norm_, c.norm_unit_offset, N * Hkv, D, c.norm_eps);
    }
  } else {
    linear_forward(q.data(), x.data(), w_q_, data_or_null(b_q_), N, C, H * D, Precision::F32);
  }

  // Each sequence attends on its own: to its cache (self) or to its encoder output (cross). Sequences that decode
  // one token from paged caches of one pool attend in one kernel call instead (one parallel region for all of
  // them; each its own numbers), where no window or position bias asks for each one's own position.
  Tensor attn({N, H, D});
  const int threads = kernels::num_threads();
  const bool batchable_layer = !c.cross && c.kernel == AttentionKernel::Flash && c.window == 0 &&
                               alibi_slopes_.empty() && data_or_null(t5_table()) == nullptr;
  auto joins = [&](const CachedSequence& s) {
    return batchable_layer && s.rows == 1 && s.cache->paged() && s.cache->pool() == sequences[0].cache->pool();
  };
  const bool batch = std::count_if(sequences.begin(), sequences.end(), joins) >= 2;
  std::vector<KVCache*> batched;  // the batch's caches, lengths and rows in q and attn
  std::vector<int32_t> lengths;
  std::vector<int64_t> batched_rows;
  int64_t r0 = 0;
  for (const CachedSequence& seq : sequences) {
    const bool in_batch = batch && joins(seq);
    const int64_t n = seq.rows;
    float* qs = q.data() + r0 * H * D;
    float* out = attn.data() + r0 * H * D;
    Tensor stats;
    if (!c.cross) {
      KVCache& cache = *seq.cache;
      const auto& cc = cache.config();
      check(cc.n_kv_heads == Hkv && cc.d_head == D && cc.batch == 1,
            "attention '{}': a session's KV cache holds batch {} × {} heads × {} channels, the layer needs 1 × {} × {}",
            name_, cc.batch, cc.n_kv_heads, cc.d_head, Hkv, D);
      float* ks = k.data() + r0 * Hkv * D;
      if (c.position == PositionScheme::RoPE) {
        RopeTables rope(seq.position, n, D, c.rope);
        kernels::rope_forward(qs, qs, rope.cos.data(), rope.sin.data(), 1, n, H, D);
        kernels::rope_forward(ks, ks, rope.cos.data(), rope.sin.data(), 1, n, Hkv, D);
      }
      cache.write(layer, seq.position, ks, v.data() + r0 * Hkv * D, n);
      const int64_t Tk = seq.position + n;
      kernels::AttentionParams<float> p = kernel_params(1, n, Tk, seq.position, nullptr, nullptr);
      if (in_batch) {  // below, with the others
        batched.push_back(&cache), lengths.push_back(static_cast<int32_t>(Tk)), batched_rows.push_back(r0);
      } else if (n == 1 && c.kernel == AttentionKernel::Flash) {
        cache.attend(layer, out, qs, p);  // a generated token reads the cache as stored
      } else {
        const float* keys = cache.keys(layer, Tk);
        const float* values = cache.values(layer, Tk);
        p.kv_capacity = cc.max_T;
        attention_kernel(c.kernel, out, stats, qs, keys, values, p);
      }
    } else {
      check(seq.context_keys != nullptr && layer < static_cast<int64_t>(seq.context_keys->size()),
            "attention '{}': cross-attention needs the session's encoder output", name_);
      const Tensor& keys = (*seq.context_keys)[layer];
      const Tensor& values = (*seq.context_values)[layer];
      const int64_t Tk = keys.size(1);
      const kernels::AttentionParams<float> p = kernel_params(1, n, Tk, 0, nullptr, nullptr);
      if (n == 1 && c.kernel == AttentionKernel::Flash) {
        std::vector<float> workspace(kernels::decode_attention_workspace_size(p, threads));
        kernels::decode_attention_forward(out, qs, keys.data(), values.data(), nullptr, nullptr, p, workspace.data());
      } else {
        attention_kernel(c.kernel, out, stats, qs, keys.data(), values.data(), p);
      }
    }
    r0 += n;
  }
  if (!batched.empty()) {
    const auto B = static_cast<int64_t>(batched.size());
    std::vector<float> qb(B * H * D), ob(B * H * D);
    for (int64_t b = 0; b < B; ++b) std::copy_n(q.data() + batched_rows[b] * H * D, H * D, qb.data() + b * H * D);
    KVCache::attend_paged(batched, lengths, layer, ob.data(), qb.data(), kernel_params(1, 1, 1, 0, nullptr, nullptr));
    for (int64_t b = 0; b < B; ++b) std::copy_n(ob.data() + b * H * D, H * D, attn.data() + batched_rows[b] * H * D);
  }
  Tensor y = Tensor::uninitialized({N, C});
  linear_forward(y.data(), attn.data(), w_o_, data_or_null(b_o_), N, H * D, C, Precision::F32);
  return y;
}

void MultiHeadAttention::project_context(const Tensor& context, Tensor& k, Tensor& v) const {
  check(config_.cross, "attention '{}': only cross-attention has a context to project", name_);
  check(context.rank() == 3 && context.size(2) == config_.d_model,
        "attention '{}': context has shape {}, expected [batch, time, {}]", name_, context.shape(), config_.d_model);
  project_context(context, k, v, Precision::F32, nullptr, nullptr);
}

void MultiHeadAttention::project_context(const Tensor& context, Tensor& k, Tensor& v, Precision precision,
                                         const LoraStream* drop, std::vector<uint16_t>* w_rounded) const {
  const int64_t C = config_.d_model, Hkv = config_.kv_heads(), D = config_.d_head();
  const int64_t B = context.size(0), Tk = context.size(1);
  std::vector<float> kv(B * Tk * 2 * Hkv * D);
  linear_forward(kv.data(), context.data(), w_kv_, data_or_null(b_kv_), B * Tk, C, 2 * Hkv * D, precision, w_rounded,
                 drop);
  k = Tensor({B, Tk, Hkv, D});
  v = Tensor({B, Tk, Hkv, D});
  split_columns(k.data(), kv.data(), B * Tk, 2 * Hkv * D, 0, Hkv * D);
  split_columns(v.data(), kv.data(), B * Tk, 2 * Hkv * D, Hkv * D, Hkv * D);
}

Tensor MultiHeadAttention::backward(const Tensor& dout, const Saved& s, Tensor* dcontext) {
  const auto& c = config_;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  check(s.x.numel() > 0, "attention '{}': backward without a forward that saved its state", name_);
  check(dout.size(-1) == C && dout.numel() == s.B * s.Tq * C,
        "attention '{}': output gradient has shape {}, forward produced {} (or its rows, {})", name_, dout.shape(),
        Shape({s.B, s.Tq, C}), Shape({s.B * s.Tq, C}));
  // out = attn · W_Oᵀ + b_O
  Tensor dattn({s.B, s.Tq, H, D});
  linear_backward(dattn.data(), w_o_, grad_or_null(b_o_), dout.data(), s.attn.data(), s.B * s.Tq, H * D, C, s.precision,
                  &s.w_out_rounded, &s.drop_out);

  kernels::AttentionParams<float> p = kernel_params(s.B, s.Tq, s.Tk, s.position, s.key_lengths, s.mask);
  p.dropout = s.dropout, p.dropout_seed = s.dropout_seed, p.dropout_offset = s.dropout_offset;
  Tensor dq(s.q.shape()), dk(s.k.shape()), dv(s.v.shape());
  const int threads = kernels::num_threads();
  switch (c.kernel) {
    case AttentionKernel::Flash: {
      std::vector<float> workspace(kernels::flash_attention_workspace_size(p, threads));
      kernels::flash_attention_backward(dq.data(), dk.data(), dv.data(), grad_or_null(t5_table()), dattn.data(),
                                        s.attn.data(), s.stats.data(), s.q.data(), s.k.data(), s.v.data(), p,
                                        workspace.data());
      break;
    }
    case AttentionKernel::Reference:
      kernels::attention_reference_backward(dq.data(), dk.data(), dv.data(), grad_or_null(t5_table()), dattn.data(),
                                            s.stats.data(), s.q.data(), s.k.data(), s.v.data(), p);
      break;
    case AttentionKernel::Linear: {
      std::vector<float> workspace(kernels::linear_attention_workspace_size(p, threads));
      kernels::linear_attention_backward(dq.data(), dk.data(), dv.data(), dattn.data(), s.q.data(), s.k.data(),
                                         s.v.data(), p, workspace.data());
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
  if (c.qk_norm) {  // back through the head norms (their gains' gradients accumulate)
    Tensor dq_raw(dq.shape()), dk_raw(dk.shape());
    std::vector<float> q_offset_gain, k_offset_gain;
    kernels::rmsnorm_backward(dq_raw.data(), q_norm_.grad.data(), dq.data(), s.q_raw.data(),
                              norm_gain(q_norm_, c.norm_unit_offset, q_offset_gain), s.q_rstd.data(), s.B * s.Tq * H, D);
    kernels::rmsnorm_backward(dk_raw.data(), k_norm_.grad.data(), dk.data(), s.k_raw.data(),
                              norm_gain(k_norm_, c.norm_unit_offset, k_offset_gain), s.k_rstd.data(), s.B * s.Tq * Hkv,
                              D);
    dq = std::move(dq_raw);
    dk = std::move(dk_raw);
  }
  Tensor dx({s.B, s.Tq, C});
  if (!c.cross) {
    const int64_t W = (H + 2 * Hkv) * D;
    std::vector<float> dqkv(s.B * s.Tq * W);
    join_columns(dqkv.data(), dq.data(), s.B * s.Tq, W, 0, H * D);
    join_columns(dqkv.data(), dk.data(), s.B * s.Tq, W, H * D, Hkv * D);
    join_columns(dqkv.data(), dv.data(), s.B * s.Tq, W, (H + Hkv) * D, Hkv * D);
    linear_backward(dx.data(), w_qkv_, grad_or_null(b_qkv_), dqkv.data(), s.x.data(), s.B * s.Tq, C, W, s.precision,
                    &s.w_in_rounded, &s.drop_in);
  } else {
    linear_backward(dx.data(), w_q_, grad_or_null(b_q_), dq.data(), s.x.data(), s.B * s.Tq, C, H * D, s.precision,
                    &s.w_in_rounded, &s.drop_in);
    std::vector<float> dkv(s.B * s.Tk * 2 * Hkv * D);
    join_columns(dkv.data(), dk.data(), s.B * s.Tk, 2 * Hkv * D, 0, Hkv * D);
    join_columns(dkv.data(), dv.data(), s.B * s.Tk, 2 * Hkv * D, Hkv * D, Hkv * D);
    check(dcontext != nullptr, "attention '{}': cross-attention's backward needs somewhere to put the context's gradient",
          name_);
    *dcontext = Tensor({s.B, s.Tk, C});
    linear_backward(dcontext->data(), w_kv_, grad_or_null(b_kv_), dkv.data(), s.context.data(), s.B * s.Tk, C,
                    2 * Hkv * D, s.precision, &s.w_kv_rounded, &s.drop_kv);
  }
  return dx;
}

}  // namespace attend::nn

// Blocks and stacks (001 §6-8): the three residual sub-layers of a block, written once for both norm
// placements, and a stack of blocks with its final norm.
#include "nn/transformer.h"

#include "kernels/dropout.h"
#include "kernels/elementwise.h"

#include <attend/error.h>

namespace attend::nn {
namespace {

AttentionConfig attention_config(const ModelConfig& c, bool causal, bool cross) {
  AttentionConfig a;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.bias = c.bias;
  a.causal = causal && !cross;
  a.cross = cross;
  a.scale = c.attention_scale;
  if (!cross) {
    switch (c.position) {
      case PositionKind::RoPE: a.position = PositionScheme::RoPE; break;
      case PositionKind::ALiBi: a.position = PositionScheme::ALiBi; break;
      case PositionKind::T5: a.position = PositionScheme::T5; break;
      default: a.position = PositionScheme::None;
    }
  }
  a.rope = kernels::RopeScaling{c.rope_base, c.rope_base_scale, c.rope_ntk_factor, c.rope_position_scale};
  a.t5_num_buckets = c.t5_num_buckets;
  a.t5_max_distance = c.t5_max_distance;
  a.dropout = c.attention_dropout;
  a.kernel = c.attention_kernel;
  return a;
}

void add_into(Tensor& dst, const Tensor& src) {
  kernels::residual_forward(dst.data(), dst.data(), src.data(), dst.numel(), 1.0f);  // dst + 1·src, threaded
}

}  // namespace

// ---- Block -----------------------------------------------------------------------------------------

Block::Block(const std::string& name, const ModelConfig& c, bool causal, bool cross, bool moe, int64_t index)
    : pre_norm_(c.pre_norm),
      alpha_(static_cast<float>(c.residual_scale)),
      index_(index),
      attn_sub_{Norm(name + ".attn_norm", c.norm, c.d_model, c.norm_eps), Dropout(c.residual_dropout)},
      ffn_sub_{Norm(name + ".ffn_norm", c.norm, c.d_model, c.norm_eps), Dropout(c.residual_dropout)},
      attn_(name + ".attn", attention_config(c, causal, false)) {
  if (cross) {
    cross_sub_ = Sublayer{Norm(name + ".cross_norm", c.norm, c.d_model, c.norm_eps), Dropout(c.residual_dropout)};
    cross_.emplace(name + ".cross_attn", attention_config(c, causal, true));
  }
  if (moe)
    moe_.emplace(name + ".ffn", c);
  else
    ffn_.emplace(name + ".ffn", c);
}

template <typename F>
Tensor Block::sublayer_forward(Sublayer& s, const Tensor& x, F&& f, const StackCall& call) {
  if (pre_norm_) {  // x + α·drop(F(norm(x)))
    Tensor branch = f(s.norm.forward(x));  // F takes its input by value: the normed rows move in
    s.dropout.forward(branch, call.training, call.rng);
    Tensor out = Tensor::uninitialized(x.shape());
    kernels::residual_forward(out.data(), x.data(), branch.data(), x.numel(), alpha_);
    return out;
  }
  // norm(x + α·drop(F(x)))
  Tensor branch = f(x.clone());
  s.dropout.forward(branch, call.training, call.rng);
  kernels::residual_forward(branch.data(), x.data(), branch.data(), x.numel(), alpha_);
  return s.norm.forward(branch);
}

// Pre-LN: dx = dout + norm'(F'(α·drop'(dout))).  Post-LN: ds = norm'(dout), dx = ds + F'(α·drop'(ds)).
template <typename F>
Tensor Block::sublayer_backward(Sublayer& s, Tensor dout, F&& f_backward) {
  Tensor dsum = pre_norm_ ? std::move(dout) : s.norm.backward(dout);
  Tensor dinner;
  if (alpha_ == 1.0f && !s.dropout.active()) {  // the branch's gradient is dsum itself
    dinner = f_backward(dsum);
  } else {
    Tensor dbranch = dsum.clone();
    if (alpha_ != 1.0f) kernels::scale(dbranch.data(), dbranch.numel(), alpha_);
    s.dropout.backward(dbranch);
    dinner = f_backward(dbranch);
  }
  if (pre_norm_) dinner = s.norm.backward(dinner);
  add_into(dsum, dinner);
  return dsum;
}

Tensor Block::attention_forward(MultiHeadAttention& attn, Tensor in, const StackCall& call) {
  const int64_t C = in.size(-1);
  in.reshape({call.B, call.T, C});
  AttentionCall ac;
  ac.training = call.training;
  ac.rng = call.rng;
  const bool cross = attn.config().cross;
  ac.key_lengths = cross ? call.context_lengths : call.lengths;
  if (!cross && call.cache != nullptr) {
    ac.cache = call.cache;
    ac.cache_layer = index_;
    ac.position = call.position;
  }
  if (!cross && call.mask != nullptr) {
    ac.mask = call.mask;
    ac.mask_shape = Shape{call.B, call.T, call.position + call.T};
  }
  Tensor out = attn.forward(in, cross ? call.context : nullptr, ac);
  out.reshape({call.B * call.T, C});
  return out;
}

Tensor Block::forward(const Tensor& x, const StackCall& call) {
  B_ = call.B, T_ = call.T;
  Tensor h =
      sublayer_forward(attn_sub_, x, [&](Tensor in) { return attention_forward(attn_, std::move(in), call); }, call);
  if (cross_)
    h = sublayer_forward(cross_sub_, h, [&](Tensor in) { return attention_forward(*cross_, std::move(in), call); },
                         call);
  return sublayer_forward(
      ffn_sub_, h,
      [&](Tensor in) {
        return moe_ ? moe_->forward(in, call.valid, call.training, call.rng)
                    : ffn_->forward(in, call.training, call.rng);
      },
      call);
}

Tensor Block::backward(Tensor dout, double daux, Tensor* dcontext) {
  const int64_t C = dout.size(-1);
  auto attention_backward = [&](MultiHeadAttention& attn, const Tensor& d) {  // d: (B·T, C) rows
    Tensor dx = attn.backward(d);
    dx.reshape({B_ * T_, C});
    return dx;
  };
  Tensor dh = sublayer_backward(ffn_sub_, std::move(dout), [&](const Tensor& d) {
    return moe_ ? moe_->backward(d, daux) : ffn_->backward(d);
  });
  if (cross_) {
    dh = sublayer_backward(cross_sub_, std::move(dh), [&](const Tensor& d) { return attention_backward(*cross_, d); });
    add_into(*dcontext, cross_->context_grad());
  }
  return sublayer_backward(attn_sub_, std::move(dh), [&](const Tensor& d) { return attention_backward(attn_, d); });
}

void Block::collect(std::vector<Parameter*>& out) {
  attn_sub_.norm.collect(out);
  for (Parameter* p : attn_.parameters()) out.push_back(p);
  if (cross_) {
    cross_sub_.norm.collect(out);
    for (Parameter* p : cross_->parameters()) out.push_back(p);
  }
  ffn_sub_.norm.collect(out);
  if (moe_)
    moe_->collect(out);
  else
    ffn_->collect(out);
}

// ---- Stack -----------------------------------------------------------------------------------------

Stack::Stack(const std::string& name, const ModelConfig& c, int64_t n_blocks, bool causal, bool cross) {
  for (int64_t i = 0; i < n_blocks; ++i)
    blocks_.push_back(
        std::make_unique<Block>(fmt::format("{}.layers.{}", name, i), c, causal, cross, c.is_moe_block(i), i));
  if (c.pre_norm) final_norm_.emplace(name + ".norm", c.norm, c.d_model, c.norm_eps);
}

Tensor Stack::forward(const Tensor& x, const StackCall& call) {
  Tensor h = x.clone();
  for (auto& block : blocks_) h = block->forward(h, call);
  return final_norm_ ? final_norm_->forward(h) : std::move(h);
}

Tensor Stack::backward(const Tensor& dout, double daux, Tensor* dcontext) {
  Tensor d = final_norm_ ? final_norm_->backward(dout) : dout.clone();
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) d = (*it)->backward(std::move(d), daux, dcontext);
  return d;
}

void Stack::collect(std::vector<Parameter*>& out) {
  const size_t first = out.size();
  for (auto& block : blocks_) block->collect(out);
  if (final_norm_) final_norm_->collect(out);
  for (size_t i = first; i < out.size(); ++i) out[i]->stack_blocks = static_cast<int64_t>(blocks_.size());
}

double Stack::aux() const {
  double sum = 0.0;
  for (const auto& block : blocks_) sum += block->aux();
  return sum;
}

void Stack::moe_stats(std::vector<MoEStats>& out) const {
  for (const auto& block : blocks_)
    if (block->moe()) out.push_back(block->moe()->stats());
}

}  // namespace attend::nn

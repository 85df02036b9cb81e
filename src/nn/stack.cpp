// Blocks and stacks (001 §6-8): the three residual sub-layers of a block, written once for both norm
// placements, and a stack of blocks with its final norm.
#include "nn/transformer.h"

#include "kernels/dropout.h"
#include "kernels/elementwise.h"

#include <attend/error.h>

#include <algorithm>

namespace attend::nn {
namespace {

// Block `index`'s attention: a sliding-window block (ModelConfig::is_local_block) gets the window and, when the
// model gives local blocks their own RoPE base, an unscaled RoPE of that base.
AttentionConfig attention_config(const ModelConfig& c, bool causal, bool cross, int64_t index) {
  AttentionConfig a;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.bias = c.bias;
  a.qkv_bias = c.qkv_bias && !cross;
  a.qk_norm = c.qk_norm && !cross;
  a.norm_eps = c.norm_eps;
  a.norm_unit_offset = c.norm_unit_offset;
  a.causal = causal && !cross;
  const bool local = a.causal && c.is_local_block(index);
  if (local) a.window = c.sliding_window;
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
  a.rope = kernels::RopeScaling{c.rope_base,
                                 c.rope_base_scale,
                                 c.rope_ntk_factor,
                                 c.rope_position_scale,
                                 c.rope_llama3_factor,
                                 c.rope_llama3_low_freq_factor,
                                 c.rope_llama3_high_freq_factor,
                                 c.rope_dynamic_factor,
                                 c.rope_original_context};
  if (local && c.rope_local_base > 0.0) a.rope = kernels::RopeScaling{.base = c.rope_local_base};
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
      attn_sub_(sublayer(name + ".attn", c)),
      ffn_sub_(sublayer(name + ".ffn", c)),
      attn_(name + ".attn", attention_config(c, causal, false, index)) {
  if (cross) {
    cross_sub_ = sublayer(name + ".cross", c);
    cross_.emplace(name + ".cross_attn", attention_config(c, causal, true, index));
  }
  if (moe)
    moe_.emplace(name + ".ffn", c);
  else
    ffn_.emplace(name + ".ffn", c);
}

Block::Sublayer Block::sublayer(const std::string& prefix, const ModelConfig& c) {
  Sublayer s{Norm(prefix + "_norm", c.norm, c.d_model, c.norm_eps, c.norm_unit_offset), Dropout(c.residual_dropout),
             std::nullopt};
  if (c.sandwich_norm) s.post_norm.emplace(prefix + "_post_norm", c.norm, c.d_model, c.norm_eps, c.norm_unit_offset);
  return s;
}

template <typename F>
Tensor Block::sublayer_forward(const Sublayer& s, const Tensor& x, F&& f, bool training, Rng* rng,
                               SublayerSaved* saved) const {
  Norm::Saved* norm_saved = saved != nullptr ? &saved->norm : nullptr;
  Dropout::Saved* dropout_saved = saved != nullptr ? &saved->dropout : nullptr;
  if (pre_norm_) {  // x + α·drop(F(norm(x))), or with a sandwich x + α·drop(norm'(F(norm(x))))
    Tensor branch = f(s.norm.forward(x, norm_saved));  // F takes its input by value: the normed rows move in
    if (s.post_norm) branch = s.post_norm->forward(branch, saved != nullptr ? &saved->post_norm : nullptr);
    s.dropout.forward(branch, training, rng, dropout_saved);
    Tensor out = Tensor::uninitialized(x.shape());
    kernels::residual_forward(out.data(), x.data(), branch.data(), x.numel(), alpha_);
    return out;
  }
  // norm(x + α·drop(F(x)))
  Tensor branch = f(x.clone());
  s.dropout.forward(branch, training, rng, dropout_saved);
  kernels::residual_forward(branch.data(), x.data(), branch.data(), x.numel(), alpha_);
  return s.norm.forward(branch, norm_saved);
}

// Pre-LN: dx = dout + norm'(F'(α·drop'(dout))), with a sandwich F'(norm''(α·drop'(dout))) inside.
// Post-LN: ds = norm'(dout), dx = ds + F'(α·drop'(ds)).
template <typename F>
Tensor Block::sublayer_backward(Sublayer& s, Tensor dout, F&& f_backward, const SublayerSaved& saved) {
  Tensor dsum = pre_norm_ ? std::move(dout) : s.norm.backward(dout, saved.norm);
  auto branch_backward = [&](const Tensor& dbranch) {
    if (!s.post_norm) return f_backward(dbranch);
    return f_backward(s.post_norm->backward(dbranch, saved.post_norm));
  };
  Tensor dinner;
  if (alpha_ == 1.0f && !saved.dropout.active) {  // the branch's gradient is dsum itself
    dinner = branch_backward(dsum);
  } else {
    Tensor dbranch = dsum.clone();
    if (alpha_ != 1.0f) kernels::scale(dbranch.data(), dbranch.numel(), alpha_);
    s.dropout.backward(dbranch, saved.dropout);
    dinner = branch_backward(dbranch);
  }
  if (pre_norm_) dinner = s.norm.backward(dinner, saved.norm);
  add_into(dsum, dinner);
  return dsum;
}

Tensor Block::attention_forward(const MultiHeadAttention& attn, Tensor in, const StackCall& call,
                                MultiHeadAttention::Saved* saved) const {
  const int64_t C = in.size(-1);
  in.reshape({call.B, call.T, C});
  AttentionCall ac;
  ac.training = call.training;
  ac.rng = call.rng;
  ac.precision = call.precision;
  const bool cross = attn.config().cross;
  ac.key_lengths = cross ? call.context_lengths : call.lengths;
  Tensor out = attn.forward(in, cross ? call.context : nullptr, ac, saved);
  out.reshape({call.B * call.T, C});
  return out;
}

Tensor Block::forward(const Tensor& x, const StackCall& call, Saved* saved) const {
  if (saved != nullptr) saved->B = call.B, saved->T = call.T;
  auto part = [&](auto member) { return saved != nullptr ? &(saved->*member) : nullptr; };
  Tensor h = sublayer_forward(
      attn_sub_, x,
      [&](Tensor in) { return attention_forward(attn_, std::move(in), call, part(&Saved::attn)); }, call.training,
      call.rng, part(&Saved::attn_sub));
  if (cross_)
    h = sublayer_forward(
        cross_sub_, h,
        [&](Tensor in) { return attention_forward(*cross_, std::move(in), call, part(&Saved::cross)); },
        call.training, call.rng, part(&Saved::cross_sub));
  return sublayer_forward(
      ffn_sub_, h,
      [&](Tensor in) {
        return moe_ ? moe_->forward(in, call.valid, call.training, call.rng, call.precision, part(&Saved::moe))
                    : ffn_->forward(in, call.training, call.rng, call.precision, part(&Saved::ffn));
      },
      call.training, call.rng, part(&Saved::ffn_sub));
}

Tensor Block::step(const Tensor& x, std::span<const CachedSequence> sequences) const {
  Tensor h = sublayer_forward(
      attn_sub_, x, [&](Tensor in) { return attn_.step(in, sequences, index_); }, false, nullptr, nullptr);
  if (cross_)
    h = sublayer_forward(
        cross_sub_, h, [&](Tensor in) { return cross_->step(in, sequences, index_); }, false, nullptr, nullptr);
  return sublayer_forward(
      ffn_sub_, h,
      [&](Tensor in) {
        if (!moe_) return ffn_->forward(in, false, nullptr, Precision::F32, nullptr);
        // Each sequence is routed on its own (the capacity limit counts its rows only), as when stepped alone.
        const int64_t C = in.size(-1);
        Tensor out = Tensor::uninitialized({in.numel() / C, C});
        int64_t r0 = 0;
        for (const CachedSequence& seq : sequences) {
          Tensor rows = Tensor::uninitialized({seq.rows, C});
          std::copy_n(in.data() + r0 * C, seq.rows * C, rows.data());
          const Tensor y = moe_->forward(rows, nullptr, false, nullptr, Precision::F32, nullptr);
          std::copy_n(y.data(), seq.rows * C, out.data() + r0 * C);
          r0 += seq.rows;
        }
        return out;
      },
      false, nullptr, nullptr);
}

Tensor Block::backward(Tensor dout, double daux, Tensor* dcontext, const Saved& saved) {
  const int64_t C = dout.size(-1);
  auto attention_backward = [&](MultiHeadAttention& attn, const Tensor& d, const MultiHeadAttention::Saved& s,
                                Tensor* dctx) {  // d: (B·T, C) rows
    Tensor dx = attn.backward(d, s, dctx);
    dx.reshape({saved.B * saved.T, C});
    return dx;
  };
  Tensor dh = sublayer_backward(
      ffn_sub_, std::move(dout),
      [&](const Tensor& d) { return moe_ ? moe_->backward(d, daux, saved.moe) : ffn_->backward(d, saved.ffn); },
      saved.ffn_sub);
  if (cross_) {
    Tensor dctx;
    dh = sublayer_backward(
        cross_sub_, std::move(dh),
        [&](const Tensor& d) { return attention_backward(*cross_, d, saved.cross, &dctx); }, saved.cross_sub);
    add_into(*dcontext, dctx);
  }
  return sublayer_backward(
      attn_sub_, std::move(dh), [&](const Tensor& d) { return attention_backward(attn_, d, saved.attn, nullptr); },
      saved.attn_sub);
}

void Block::add_lora(const LoraConfig& config) {
  attn_.add_lora(config);
  if (cross_) cross_->add_lora(config);
  if (ffn_) ffn_->add_lora(config);  // MoE blocks take none (ModelConfig::validate and Model::add_lora refuse)
}

void Block::merge_lora() {
  attn_.merge_lora();
  if (cross_) cross_->merge_lora();
  if (ffn_) ffn_->merge_lora();
}

void Block::collect(std::vector<Parameter*>& out) {
  attn_sub_.norm.collect(out);
  for (Parameter* p : attn_.parameters()) out.push_back(p);
  if (attn_sub_.post_norm) attn_sub_.post_norm->collect(out);
  if (cross_) {
    cross_sub_.norm.collect(out);
    for (Parameter* p : cross_->parameters()) out.push_back(p);
    if (cross_sub_.post_norm) cross_sub_.post_norm->collect(out);
  }
  ffn_sub_.norm.collect(out);
  if (moe_)
    moe_->collect(out);
  else
    ffn_->collect(out);
  if (ffn_sub_.post_norm) ffn_sub_.post_norm->collect(out);
}

// ---- Stack -----------------------------------------------------------------------------------------

Stack::Stack(const std::string& name, const ModelConfig& c, int64_t n_blocks, bool causal, bool cross) {
  for (int64_t i = 0; i < n_blocks; ++i)
    blocks_.push_back(
        std::make_unique<Block>(fmt::format("{}.layers.{}", name, i), c, causal, cross, c.is_moe_block(i), i));
  if (c.position == PositionKind::T5 && c.t5_shared_bias)  // block 0's table serves the stack
    for (size_t i = 1; i < blocks_.size(); ++i) blocks_[i]->self_attention().share_t5_table(blocks_[0]->self_attention());
  if (c.pre_norm) final_norm_.emplace(name + ".norm", c.norm, c.d_model, c.norm_eps, c.norm_unit_offset);
}

Tensor Stack::forward(const Tensor& x, const StackCall& call, Saved* saved) const {
  if (saved != nullptr) saved->blocks.resize(blocks_.size());
  Tensor h = x.clone();
  for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward(h, call, saved ? &saved->blocks[i] : nullptr);
  return final_norm_ ? final_norm_->forward(h, saved ? &saved->final_norm : nullptr) : std::move(h);
}

Tensor Stack::step(const Tensor& x, std::span<const CachedSequence> sequences) const {
  Tensor h = x.clone();
  for (const auto& block : blocks_) h = block->step(h, sequences);
  return final_norm_ ? final_norm_->forward(h, nullptr) : std::move(h);
}

Tensor Stack::backward(const Tensor& dout, double daux, Tensor* dcontext, const Saved& saved,
                       const std::function<void(size_t)>& after_block) {
  Tensor d = final_norm_ ? final_norm_->backward(dout, saved.final_norm) : dout.clone();
  for (size_t i = blocks_.size(); i-- > 0;) {
    d = blocks_[i]->backward(std::move(d), daux, dcontext, saved.blocks[i]);
    if (after_block) after_block(i);
  }
  return d;
}

void Stack::add_lora(const LoraConfig& config) {
  for (auto& b : blocks_) b->add_lora(config);
}

void Stack::merge_lora() {
  for (auto& b : blocks_) b->merge_lora();
}

const Parameter& Stack::first_parameter(size_t block) const {
  std::vector<Parameter*> params;
  blocks_.at(block)->collect(params);
  return *params.front();
}

void Stack::project_context(const Tensor& context, std::vector<Tensor>& keys, std::vector<Tensor>& values) const {
  keys.clear();
  values.clear();
  keys.resize(blocks_.size());
  values.resize(blocks_.size());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const MultiHeadAttention* cross = blocks_[i]->cross_attention();
    check(cross != nullptr, "generation: block {} has no cross-attention to give the encoder output to", i);
    cross->project_context(context, keys[i], values[i]);
  }
}

void Stack::collect(std::vector<Parameter*>& out) {
  const size_t first = out.size();
  for (auto& block : blocks_) block->collect(out);
  if (final_norm_) final_norm_->collect(out);
  for (size_t i = first; i < out.size(); ++i) out[i]->stack_blocks = static_cast<int64_t>(blocks_.size());
}

double Stack::aux(const Saved& saved) const {
  double sum = 0.0;  // a forward that kept nothing (evaluation's logits-only state) has no routing to sum
  for (size_t i = 0; i < blocks_.size() && i < saved.blocks.size(); ++i) sum += blocks_[i]->aux(saved.blocks[i]);
  return sum;
}

void Stack::moe_stats(const Saved& saved, std::vector<MoEStats>& out) const {
  for (size_t i = 0; i < blocks_.size() && i < saved.blocks.size(); ++i)
    if (blocks_[i]->moe()) out.push_back(blocks_[i]->moe()->stats(saved.blocks[i].moe));
}

}  // namespace attend::nn

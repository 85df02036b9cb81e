#include "nn/layers.h"

#include "kernels/activation.h"
#include "kernels/convert.h"
#include "kernels/dropout.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"

#include <attend/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace attend::nn {
namespace {

Activation activation_of(FfnKind kind) {
  switch (kind) {
    case FfnKind::ReLU: return Activation::ReLU;
    case FfnKind::GELU: return Activation::GELU;
    case FfnKind::GELUTanh: return Activation::GELUTanh;
    case FfnKind::SwiGLU: return Activation::SiLU;
  }
  return Activation::GELU;
}

// The rows of x (a (N, C) tensor) at `rows`, as a (rows, C) tensor; and the inverse, adding back.
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t C = x.size(-1);
  Tensor out({static_cast<int64_t>(rows.size()), C});
  for (size_t r = 0; r < rows.size(); ++r) std::memcpy(out.data() + r * C, x.data() + rows[r] * C, C * sizeof(float));
  return out;
}

kernels::Half half_of(Precision p) { return p == Precision::BF16 ? kernels::Half::BF16 : kernels::Half::F16; }

// The weight rounded to its precision, made once per forward (Parameter::rounded_stale).
const uint16_t* rounded_weight(const Parameter& w) {
  if (w.rounded_stale || w.rounded.size() != static_cast<size_t>(w.numel())) {
    w.rounded.resize(static_cast<size_t>(w.numel()));
    kernels::round_to_half(half_of(w.precision), w.rounded.data(), w.value.data(), w.numel());
    w.rounded_stale = false;
  }
  return w.rounded.data();
}

// Rounded copies of activations and gradients, reused from call to call (the model runs one layer at a time).
uint16_t* rounded(int slot, Precision p, const float* x, int64_t n) {
  thread_local std::vector<uint16_t> buffers[2];
  std::vector<uint16_t>& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  kernels::round_to_half(half_of(p), b.data(), x, n);
  return b.data();
}

}  // namespace

void linear_forward(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (weight.precision != Precision::F32)
    kernels::matmul_forward_half(half_of(weight.precision), out, rounded(0, weight.precision, inp, N * C),
                                 rounded_weight(weight), bias, N, C, OC);
  else if (!weight.bf16.empty() && N <= kernels::kGemvRows)
    kernels::matmul_forward_bf16(out, inp, weight.bf16.data(), bias, N, C, OC);
  else if (!weight.bf16.empty())  // a prompt: bf16 products of twice sgemm's rate, inputs rounded as in training
    kernels::matmul_forward_half(kernels::Half::BF16, out, rounded(0, Precision::BF16, inp, N * C),
                                 weight.bf16.data(), bias, N, C, OC);
  else
    kernels::matmul_forward(out, inp, weight.value.data(), bias, N, C, OC);
}

// ---- Linear ----------------------------------------------------------------------------------------

Linear::Linear(const std::string& name, int64_t in, int64_t out, bool has_bias, Role role, Role bias_role)
    : weight(name + ".weight", {out, in}, role) {
  if (has_bias) bias = Parameter(name + ".bias", {out}, bias_role);
}

Tensor Linear::forward(const Tensor& x) {
  const int64_t N = x.numel() / in();
  rows_ = N;
  Tensor y = Tensor::uninitialized({N, out()});  // matmul_forward writes every element
  const float* b = bias.numel() ? bias.value.data() : nullptr;
  if (weight.precision == Precision::F32) {
    x_ = x.clone();
    linear_forward(y.data(), x.data(), weight, b, N, in(), out());
    return y;
  }
  // Mixed precision keeps the rounded input for backward: half the bytes of a copy, and no second rounding.
  x_ = Tensor();
  x_rounded_.resize(static_cast<size_t>(N * in()));
  kernels::round_to_half(half_of(weight.precision), x_rounded_.data(), x.data(), N * in());
  kernels::matmul_forward_half(half_of(weight.precision), y.data(), x_rounded_.data(), rounded_weight(weight), b, N,
                               in(), out());
  return y;
}

void linear_backward(float* dinp, Parameter& weight, float* dbias, const float* dout, const float* inp, int64_t N,
                     int64_t C, int64_t OC) {
  if (weight.precision == Precision::F32)
    return kernels::matmul_backward(dinp, weight.grad.data(), dbias, dout, inp, weight.value.data(), N, C, OC);
  kernels::matmul_backward_half(half_of(weight.precision), dinp, weight.grad.data(), dbias, dout,
                                rounded(0, weight.precision, dout, N * OC), rounded(1, weight.precision, inp, N * C),
                                rounded_weight(weight), N, C, OC);
}

Tensor Linear::backward(const Tensor& dout) {
  const int64_t N = rows_;
  Tensor dx({N, in()});
  float* dbias = bias.numel() ? bias.grad.data() : nullptr;
  if (weight.precision == Precision::F32) {
    linear_backward(dx.data(), weight, dbias, dout.data(), x_.data(), N, in(), out());
  } else {
    check(x_rounded_.size() == static_cast<size_t>(N * in()), "linear '{}': backward without its forward", weight.name);
    kernels::matmul_backward_half(half_of(weight.precision), dx.data(), weight.grad.data(), dbias, dout.data(),
                                  rounded(0, weight.precision, dout.data(), N * out()), x_rounded_.data(),
                                  rounded_weight(weight), N, in(), out());
  }
  return dx;
}

void Linear::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (bias.numel()) out.push_back(&bias);
}

// ---- Norm ------------------------------------------------------------------------------------------

Norm::Norm(const std::string& name, NormKind kind, int64_t C, double eps, Role gain_role, Role bias_role)
    : weight(name + ".weight", {C}, gain_role), kind_(kind), eps_(static_cast<float>(eps)) {
  if (kind == NormKind::LayerNorm) bias = Parameter(name + ".bias", {C}, bias_role);
  weight.value.fill(1.0f);
}

Tensor Norm::forward(const Tensor& x) {
  const int64_t C = weight.numel(), N = x.numel() / C;
  x_ = x.clone();
  Tensor y = Tensor::uninitialized({N, C});
  rstd_ = Tensor({N});
  if (kind_ == NormKind::LayerNorm) {
    mean_ = Tensor({N});
    kernels::layernorm_forward(y.data(), mean_.data(), rstd_.data(), x.data(), weight.value.data(), bias.value.data(), N,
                               C, eps_);
  } else {
    kernels::rmsnorm_forward(y.data(), rstd_.data(), x.data(), weight.value.data(), N, C, eps_);
  }
  return y;
}

Tensor Norm::backward(const Tensor& dout) {
  const int64_t C = weight.numel(), N = x_.numel() / C;
  Tensor dx({N, C});
  if (kind_ == NormKind::LayerNorm)
    kernels::layernorm_backward(dx.data(), weight.grad.data(), bias.grad.data(), dout.data(), x_.data(),
                                weight.value.data(), mean_.data(), rstd_.data(), N, C);
  else
    kernels::rmsnorm_backward(dx.data(), weight.grad.data(), dout.data(), x_.data(), weight.value.data(), rstd_.data(),
                              N, C);
  return dx;
}

void Norm::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (bias.numel()) out.push_back(&bias);
}

// ---- Dropout ---------------------------------------------------------------------------------------

void Dropout::forward(Tensor& x, bool training, Rng* rng) {
  active_ = training && p_ > 0.0f;
  if (!active_) return;
  check(rng != nullptr, "dropout: training with dropout {} needs a random stream", p_);
  seed_ = rng->seed();
  offset_ = rng->reserve(static_cast<uint64_t>(x.numel()));
  kernels::dropout_forward(x.data(), x.data(), x.numel(), p_, seed_, offset_);
}

void Dropout::backward(Tensor& dx) const {
  if (!active_) return;
  // The gradient of x·m/(1 − p) is dy·m/(1 − p): the forward's multiply by the same regenerated mask, in place.
  kernels::dropout_forward(dx.data(), dx.data(), dx.numel(), p_, seed_, offset_);
}

// ---- FeedForward -----------------------------------------------------------------------------------

FeedForward::FeedForward(const std::string& name, const ModelConfig& c)
    : kind_(c.activation),
      up_(name + ".up", c.d_model, c.ffn_hidden(), c.bias, Role::FfnIn, Role::FfnBias),
      down_(name + ".down", c.ffn_hidden(), c.d_model, c.bias, Role::FfnOut, Role::FfnBias),
      dropout_(c.ffn_dropout) {
  if (kind_ == FfnKind::SwiGLU) gate_ = Linear(name + ".gate", c.d_model, c.ffn_hidden(), c.bias, Role::FfnIn, Role::FfnBias);
}

Tensor FeedForward::forward(const Tensor& x, bool training, Rng* rng) {
  u_ = up_.forward(x);
  Tensor h = Tensor::uninitialized(u_.shape());
  if (kind_ == FfnKind::SwiGLU) {
    g_ = gate_.forward(x);
    kernels::swiglu_forward(h.data(), g_.data(), u_.data(), h.numel());
  } else {
    kernels::activation_forward(activation_of(kind_), h.data(), u_.data(), h.numel());
  }
  dropout_.forward(h, training, rng);
  return down_.forward(h);
}

Tensor FeedForward::backward(const Tensor& dout) {
  Tensor dh = down_.backward(dout);
  dropout_.backward(dh);
  Tensor du(u_.shape());
  if (kind_ == FfnKind::SwiGLU) {
    Tensor dg(g_.shape());
    kernels::swiglu_backward(dg.data(), du.data(), dh.data(), g_.data(), u_.data(), dh.numel());
    Tensor dx = up_.backward(du);
    const Tensor dx_gate = gate_.backward(dg);
    kernels::residual_forward(dx.data(), dx.data(), dx_gate.data(), dx.numel(), 1.0f);
    return dx;
  }
  kernels::activation_backward(activation_of(kind_), du.data(), dh.data(), u_.data(), dh.numel());
  return up_.backward(du);
}

void FeedForward::collect(std::vector<Parameter*>& out) {
  up_.collect(out);
  if (kind_ == FfnKind::SwiGLU) gate_.collect(out);
  down_.collect(out);
}

// ---- Mixture of Experts ----------------------------------------------------------------------------

MixtureOfExperts::MixtureOfExperts(const std::string& name, const ModelConfig& c)
    : name_(name),
      E_(c.n_experts),
      k_(c.moe_top_k),
      capacity_factor_(c.moe_capacity_factor),
      normalize_(c.moe_normalize_weights),
      router_(name + ".router", c.d_model, c.n_experts, /*bias=*/false, Role::Router, Role::FfnBias) {
  for (int64_t e = 0; e < E_; ++e) experts_.emplace_back(fmt::format("{}.experts.{}", name, e), c);
}

Tensor MixtureOfExperts::forward(const Tensor& x, const uint8_t* valid, bool training, Rng* rng) {
  const int64_t C = x.size(-1);
  N_ = x.numel() / C;
  rows_.clear();
  for (int64_t n = 0; n < N_; ++n)
    if (valid == nullptr || valid[n]) rows_.push_back(n);
  const auto R = static_cast<int64_t>(rows_.size());
  Tensor y({N_, C});
  expert_rows_.assign(E_, {});
  expert_out_.clear();
  expert_out_.resize(E_);
  fraction_.assign(E_, 0.0);
  choices_.clear();
  aux_ = 0.0;
  refused_ = 0;
  if (R == 0) return y;  // nothing but padding

  // Router: p = softmax(x W_rᵀ) over the valid rows.
  const Tensor logits = router_.forward(gather_rows(x, rows_));
  probs_ = Tensor({R, E_});
  kernels::softmax_forward(probs_.data(), logits.data(), R, E_, 1.0f);

  // Top-k per row (stable: the lower index wins a tie), then capacity rank by rank.
  choices_.assign(static_cast<size_t>(R * k_), Choice{});
  std::vector<int64_t> order(E_);
  for (int64_t r = 0; r < R; ++r) {
    const float* p = probs_.data() + r * E_;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < k_; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k_; ++j)
      choices_[r * k_ + j] = Choice{r, order[j], -1, normalize_ ? p[order[j]] / sum : double(p[order[j]])};
  }
  const int64_t capacity = capacity_factor_ > 0.0
                               ? static_cast<int64_t>(std::ceil(capacity_factor_ * double(R * k_) / double(E_) - 1e-9))
                               : R * k_;
  for (int64_t j = 0; j < k_; ++j)
    for (int64_t r = 0; r < R; ++r) {
      Choice& ch = choices_[r * k_ + j];
      fraction_[ch.expert] += 1.0 / double(R * k_);
      auto& slots = expert_rows_[ch.expert];
      if (static_cast<int64_t>(slots.size()) < capacity) {
        ch.slot = static_cast<int64_t>(slots.size());
        slots.push_back(r);
      } else {
        ++refused_;
      }
    }

  // aux = E·Σ_e f_e·P_e
  for (int64_t e = 0; e < E_; ++e) {
    double mean_p = 0.0;
    for (int64_t r = 0; r < R; ++r) mean_p += probs_[r * E_ + e];
    aux_ += double(E_) * fraction_[e] * mean_p / double(R);
  }

  // Each expert runs once on its batch of rows; outputs are added back weighted.
  for (int64_t e = 0; e < E_; ++e) {
    if (expert_rows_[e].empty()) continue;
    std::vector<int64_t> src(expert_rows_[e].size());
    for (size_t s = 0; s < src.size(); ++s) src[s] = rows_[expert_rows_[e][s]];
    expert_out_[e] = experts_[e].forward(gather_rows(x, src), training, rng);
  }
  for (const Choice& ch : choices_) {
    if (ch.slot < 0) continue;
    const float* o = expert_out_[ch.expert].data() + ch.slot * C;
    float* dst = y.data() + rows_[ch.row] * C;
    const auto w = static_cast<float>(ch.weight);
    for (int64_t c = 0; c < C; ++c) dst[c] += w * o[c];
  }
  return y;
}

// With y = Σ_j w_j·o_j:  do_j = w_j·dy,  dw_j = ⟨dy, o_j⟩.
// Renormalised weights w_j = p_j/S: dp_i = dw_i/S − (Σ_j dw_j·p_j)/S² for the k chosen.
// Aux: ∂aux/∂p_{r,e} = E·f_e/R. Then the softmax Jacobian and the router's matmul.
Tensor MixtureOfExperts::backward(const Tensor& dout, double daux) {
  const int64_t C = dout.size(-1);
  const auto R = static_cast<int64_t>(rows_.size());
  Tensor dx({N_, C});
  if (R == 0) return dx;
  std::vector<double> dweight(choices_.size(), 0.0);
  std::vector<Tensor> dexpert_out(E_);
  for (int64_t e = 0; e < E_; ++e)
    if (!expert_rows_[e].empty()) dexpert_out[e] = Tensor(expert_out_[e].shape());
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& ch = choices_[i];
    if (ch.slot < 0) continue;
    const float* dy = dout.data() + rows_[ch.row] * C;
    const float* o = expert_out_[ch.expert].data() + ch.slot * C;
    float* dst = dexpert_out[ch.expert].data() + ch.slot * C;
    double dot = 0.0;
    const auto w = static_cast<float>(ch.weight);
    for (int64_t c = 0; c < C; ++c) {
      dst[c] = w * dy[c];
      dot += double(dy[c]) * o[c];
    }
    dweight[i] = dot;
  }
  for (int64_t e = 0; e < E_; ++e) {
    if (expert_rows_[e].empty()) continue;
    const Tensor dxe = experts_[e].backward(dexpert_out[e]);
    for (size_t s = 0; s < expert_rows_[e].size(); ++s) {
      float* dst = dx.data() + rows_[expert_rows_[e][s]] * C;
      const float* src = dxe.data() + static_cast<int64_t>(s) * C;
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }

  Tensor dprobs({R, E_});
  for (int64_t r = 0; r < R; ++r) {
    const float* p = probs_.data() + r * E_;
    float* dp = dprobs.data() + r * E_;
    const Choice* ch = choices_.data() + r * k_;
    const double* dw = dweight.data() + r * k_;
    if (normalize_) {
      double S = 0.0, dw_p = 0.0;
      for (int64_t j = 0; j < k_; ++j) {
        S += p[ch[j].expert];
        dw_p += dw[j] * p[ch[j].expert];
      }
      for (int64_t j = 0; j < k_; ++j) dp[ch[j].expert] += static_cast<float>(dw[j] / S - dw_p / (S * S));
    } else {
      for (int64_t j = 0; j < k_; ++j) dp[ch[j].expert] += static_cast<float>(dw[j]);
    }
    for (int64_t e = 0; e < E_; ++e) dp[e] += static_cast<float>(daux * double(E_) * fraction_[e] / double(R));
  }
  Tensor dlogits({R, E_});
  kernels::softmax_backward(dlogits.data(), dprobs.data(), probs_.data(), R, E_, 1.0f);
  const Tensor dxr = router_.backward(dlogits);
  for (int64_t r = 0; r < R; ++r) {
    float* dst = dx.data() + rows_[r] * C;
    for (int64_t c = 0; c < C; ++c) dst[c] += dxr[r * C + c];
  }
  return dx;
}

void MixtureOfExperts::collect(std::vector<Parameter*>& out) {
  router_.collect(out);
  for (auto& e : experts_) e.collect(out);
}

MoEStats MixtureOfExperts::stats() const {
  MoEStats s{name_, {}, refused_};
  for (const auto& rows : expert_rows_) s.tokens_per_expert.push_back(static_cast<int64_t>(rows.size()));
  return s;
}

}  // namespace attend::nn

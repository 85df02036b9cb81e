// The optimisers' element-wise updates (003 §4.1, 004 §9.1-9.2), in place on one parameter tensor.
// The scalar factors (bias corrections, the learning rate) are computed once per step by the caller.
#pragma once

#include <cstdint>

namespace attend::kernels {

// SGD with optional L2 weight decay: g' = g + λθ;  θ ← θ − η·g'.
void sgd_update(float* param, const float* grad, int64_t n, float lr, float weight_decay);

// Momentum with velocity v (g' = g + λθ as above):
//   EMA form (the notes' eq. 5-6):  v ← βv + (1 − β)g';  θ ← θ − ηv
//   classic form (PyTorch):         v ← βv + g';         θ ← θ − ηv
// `gain` is 1 − β (EMA) or 1 (classic), rounded from double.
void momentum_update(float* param, float* velocity, const float* grad, int64_t n, float lr, float beta, float gain,
                     float weight_decay);

// Adam and AdamW (eq. 7-9):
//   g' = g + λ_L2·θ (Adam's L2 form; 0 for AdamW)
//   m ← β₁m + (1 − β₁)g';  v ← β₂v + (1 − β₂)g'²
//   θ ← (1 − η·λ_decoupled)·θ − η·(m/c₁) / (√(v/c₂) + ε)
// with c₁ = 1 − β₁ᵗ and c₂ = 1 − Π_s β₂(s) the bias corrections. Moments accumulate in float; the
// arithmetic of one element is done in double so the result is the same on every vector width.
struct AdamStep {
  float lr, beta1, beta2, eps;
  float gain1, gain2;               // 1 − β₁ and 1 − β₂, rounded from double (1.0f − 0.999f is 0.00099998713)
  double correction1, correction2;  // c₁, c₂
  float l2 = 0.0f;                  // Adam: weight decay added to the gradient
  float decoupled = 0.0f;           // AdamW: weight decay applied to the weights
};
void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamStep& step);

}  // namespace attend::kernels

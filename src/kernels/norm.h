// LayerNorm and RMSNorm over the last dimension, forward and backward   (000 §3.3-3.4).
#pragma once

#include <cstdint>

namespace attend::kernels {

// LayerNorm(x) = γ ⊙ (x − μ)/√(σ² + ε) + β, with μ and σ² the mean and (biased) variance of the row.
template <typename T>
void layernorm_forward(T* out,           // (N, C)
                       T* mean,          // (N) saved for backward
                       T* rstd,          // (N) saved for backward: 1/√(σ² + ε)
                       const T* inp,     // (N, C)
                       const T* weight,  // (C) γ
                       const T* bias,    // (C) β, or nullptr
                       int64_t N, int64_t C, T eps);

// With x̂ = (x − μ)·rstd and g = dout ⊙ γ:
//   dβ += Σ_n dout,   dγ += Σ_n dout ⊙ x̂,
//   dx += rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))
// (term 1: the direct path; term 2: through μ; term 3: through σ²).
template <typename T>
void layernorm_backward(T* dinp,          // (N, C), accumulated
                        T* dweight,       // (C), accumulated, or nullptr (a frozen gain)
                        T* dbias,         // (C), accumulated, or nullptr
                        const T* dout,    // (N, C)
                        const T* inp,     // (N, C)
                        const T* weight,  // (C)
                        const T* mean,    // (N)
                        const T* rstd,    // (N)
                        int64_t N, int64_t C);

// RMSNorm(x) = γ ⊙ x / √(mean(x²) + ε): LayerNorm without the centring and without β.
template <typename T>
void rmsnorm_forward(T* out,           // (N, C)
                     T* rstd,          // (N) saved for backward: 1/√(mean(x²) + ε)
                     const T* inp,     // (N, C)
                     const T* weight,  // (C)
                     int64_t N, int64_t C, T eps);

// With x̂ = x·rstd and g = dout ⊙ γ:  dγ += Σ_n dout ⊙ x̂,  dx += rstd · (g − x̂ · mean(g ⊙ x̂)).
template <typename T>
void rmsnorm_backward(T* dinp,          // (N, C), accumulated
                      T* dweight,       // (C), accumulated, or nullptr (a frozen gain)
                      const T* dout,    // (N, C)
                      const T* inp,     // (N, C)
                      const T* weight,  // (C)
                      const T* rstd,    // (N)
                      int64_t N, int64_t C);

}  // namespace attend::kernels

// Cross-entropy over a vocabulary, with label smoothing and an ignore index, fused with log-softmax.
//
// With smoothing α the target distribution is y = (1 − α)·onehot(t) + α/V (003 §12.2, the same
// convention as PyTorch), and the loss of one row is
//   ℓ = −Σ_j y_j log p_j = lse(z) − (1 − α)·z_t − (α/V)·Σ_j z_j
// Rows whose target equals `ignore_index` (padding) have loss 0 and get no gradient.
#pragma once

#include <cstdint>

namespace attend::kernels {

// Writes each row's loss and its log-sum-exp (kept for backward). Returns the number of rows that
// were not ignored, the denominator of the mean loss.
template <typename T>
int64_t cross_entropy_forward(T* losses,              // (N)
                              T* lse,                 // (N) saved for backward
                              const T* logits,        // (N, V)
                              const int32_t* targets, // (N)
                              int64_t N, int64_t V, T label_smoothing, int32_t ignore_index);

// ∂ℓ/∂z_j = softmax(z)_j − y_j, so dlogits[n] += dlosses[n] · (p − y).
template <typename T>
void cross_entropy_backward(T* dlogits,             // (N, V), accumulated
                            const T* dlosses,       // (N)
                            const T* logits,        // (N, V)
                            const T* lse,           // (N)
                            const int32_t* targets, // (N)
                            int64_t N, int64_t V, T label_smoothing, int32_t ignore_index);

}  // namespace attend::kernels

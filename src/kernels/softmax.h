// Softmax with temperature, log-softmax, log-sum-exp and the softmax Jacobian, row by row.
//
// Every reduction subtracts the row maximum first (the log-sum-exp trick, 004 §9.5 / 003 §4.3) and
// sums in double, so a row such as [1000, 1001] neither overflows nor loses precision.
#pragma once

#include <cstdint>

namespace attend::kernels {

// out[n] = softmax(inp[n] / temperature):  p_i = exp(z_i/τ) / Σ_j exp(z_j/τ)    (002 §1.3)
// A row that is entirely -inf (every key masked) gives zeros, not NaN.
template <typename T>
void softmax_forward(T* out,          // (N, V)
                     const T* inp,    // (N, V)
                     int64_t N, int64_t V, T temperature);

// With p = softmax(z/τ), the Jacobian is ∂p_i/∂z_j = p_i(δ_ij − p_j)/τ (003 eq. 24), so
//   dz_j = (1/τ) · p_j · (dp_j − Σ_i dp_i p_i)
// which never forms the V×V matrix.
template <typename T>
void softmax_backward(T* dinp,         // (N, V), accumulated
                      const T* dout,   // (N, V)
                      const T* out,    // (N, V) the forward's probabilities
                      int64_t N, int64_t V, T temperature);

// out[n] = inp[n] − logsumexp(inp[n])
template <typename T>
void log_softmax_forward(T* out, const T* inp, int64_t N, int64_t V);

// y = z − lse(z) and ∂lse/∂z = softmax(z), so dz = dy − softmax(z) · Σ_i dy_i.
template <typename T>
void log_softmax_backward(T* dinp,        // (N, V), accumulated
                          const T* dout,  // (N, V)
                          const T* out,   // (N, V) the forward's log-probabilities
                          int64_t N, int64_t V);

// out[n] = log Σ_j exp(inp[n, j]) = c + log Σ_j exp(inp[n, j] − c), c = max_j inp[n, j]   (004 §9.5)
template <typename T>
void logsumexp_forward(T* out,        // (N)
                       const T* inp,  // (N, V)
                       int64_t N, int64_t V);

// ∂lse/∂z_j = exp(z_j − lse) = softmax(z)_j, so dinp[n] += dout[n] · softmax(inp[n]).
template <typename T>
void logsumexp_backward(T* dinp,        // (N, V), accumulated
                        const T* dout,  // (N)
                        const T* inp,   // (N, V)
                        const T* out,   // (N) the forward's log-sum-exp values
                        int64_t N, int64_t V);

// The full Jacobian of softmax at probabilities p: J[i][j] = p_i(δ_ij − p_j)   (002 §1.4).
// Each row sums to zero because the probabilities always sum to one. For teaching and tests.
template <typename T>
void softmax_jacobian(T* jacobian,   // (V, V)
                      const T* p,    // (V)
                      int64_t V);

}  // namespace attend::kernels

// Inverted dropout and the scaled residual add   (003 §12.1, 000 §3.4).
#pragma once

#include <attend/rng.h>

#include <cstdint>

namespace attend::kernels {

// The factor inverted dropout applies to element `index` of stream `seed`: 1/(1 − p) if kept, 0 if
// dropped. Forward and backward (and attention's tiles) all call this, so they agree on the mask.
template <typename T>
inline T dropout_keep_scale(uint64_t index, float p, uint64_t seed) {
  if (p <= 0.0f) return T(1);
  if (p >= 1.0f) return T(0);
  return random_uniform(seed, index) >= p ? T(1) / (T(1) - T(p)) : T(0);
}

// scales[c] = dropout_keep_scale(first + c, p, seed) for c < n, drawing the random numbers a Philox block (four
// numbers) at a time.
template <typename T>
inline void dropout_keep_scales(T* scales, int64_t n, uint64_t first, float p, uint64_t seed) {
  float u[256];
  for (int64_t c0 = 0; c0 < n; c0 += 256) {
    const int64_t len = n - c0 < 256 ? n - c0 : 256;
    random_uniforms(seed, first + static_cast<uint64_t>(c0), len, u);
    const T keep = p >= 1.0f ? T(0) : T(1) / (T(1) - T(p));
    for (int64_t c = 0; c < len; ++c) scales[c0 + c] = u[c] >= p ? keep : T(0);
  }
}

// Keeps element i when random_uniform(seed, offset + i) ≥ p and scales kept elements by 1/(1 − p),
// so the expected output equals the input and evaluation needs no rescaling. The mask is a pure
// function of (seed, offset + i): backward regenerates it instead of storing it, and the result is the
// same for any thread count. p = 0 copies; p = 1 drops everything.
template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t offset);

// dinp += dout · mask / (1 − p), with the forward's mask.
template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, float p, uint64_t seed, uint64_t offset);

// h_{l+1} = h_l + α·F(h_l): out = h + alpha · f.
template <typename T>
void residual_forward(T* out, const T* h, const T* f, int64_t n, T alpha);

// dh += dout;  df += α · dout.
template <typename T>
void residual_backward(T* dh, T* df, const T* dout, int64_t n, T alpha);

}  // namespace attend::kernels

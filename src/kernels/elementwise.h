// Whole-buffer passes that are bound by memory: fill, scale, sum of squares. Parallel over fixed blocks,
// so the results do not depend on the thread count. And sampling's weights of a vocabulary's logits.
#pragma once

#include <cstdint>

namespace attend::kernels {

void fill(float* out, int64_t n, float value);
void scale(float* x, int64_t n, float factor);
// Σ x², accumulated per block of 64k elements in double and the blocks added in order.
double sum_squares(const float* x, int64_t n);
// Sampling's unnormalised probabilities: w[i] = e^{(z[i] − top)·inv_t} in double, where top ≥ every z[i] (the
// largest logit) and inv_t > 0 (one over the temperature), within 4 units in the last place of the exact
// exponential of the argument worked out in double from the float logits; a NaN logit gets weight 0. Returns Σ w. On one thread,
// vectors of doubles: 50,257 logits (GPT-2's vocabulary) in about a tenth of the time of a std::exp each.
double exp_weights(double* w, const float* z, int64_t n, float top, double inv_t);

}  // namespace attend::kernels

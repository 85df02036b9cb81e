// Whole-buffer passes that are bound by memory: fill, scale, sum of squares. Parallel over fixed blocks,
// so the results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace attend::kernels {

void fill(float* out, int64_t n, float value);
void scale(float* x, int64_t n, float factor);
// Σ x², accumulated per block of 64k elements in double and the blocks added in order.
double sum_squares(const float* x, int64_t n);

}  // namespace attend::kernels

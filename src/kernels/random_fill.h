// Filling a buffer with normal random numbers for initialisation (004 §8.1).
#pragma once

#include <cstdint>

namespace attend::kernels {

// out[i] ~ N(mean, stddev²), drawn by Box-Muller from the uniform numbers 2⌊i/2⌋ and 2⌊i/2⌋ + 1 of
// stream `seed` after `offset`: element i is a pure function of (seed, offset, i), so the result is the same
// for any thread count. Consumes n rounded up to even numbers of the stream.
void fill_normal(float* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset);

}  // namespace attend::kernels

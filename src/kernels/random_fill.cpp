#include "kernels/random_fill.h"

#include "kernels/parallel.h"

#include <attend/rng.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace attend::kernels {

// z₀ = √(−2 ln u₁)·cos(2πu₂), z₁ = √(−2 ln u₁)·sin(2πu₂), with u₁ ∈ (0, 1] so the logarithm is finite.
void fill_normal(float* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset) {
  const int64_t pairs = (n + 1) / 2;
  parallel_for(pairs, 4096, [&](int64_t begin, int64_t end) {
    // The uniforms u(seed, offset + i) come a batch at a time: one Philox block gives four of them (the
    // same values random_uniform gives one by one, at a quarter of the blocks).
    constexpr int64_t kBatch = 256;  // pairs
    float u[2 * kBatch];
    for (int64_t p0 = begin; p0 < end; p0 += kBatch) {
      const int64_t count = std::min(kBatch, end - p0);
      random_uniforms(seed, offset + 2 * p0, 2 * count, u);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t p = p0 + i;
        const double u1 = 1.0 - u[2 * i], u2 = u[2 * i + 1];
        const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
        const double a = 2.0 * std::numbers::pi * u2;
        out[2 * p] = static_cast<float>(mean + r * std::cos(a));
        if (2 * p + 1 < n) out[2 * p + 1] = static_cast<float>(mean + r * std::sin(a));
      }
    }
  });
}

}  // namespace attend::kernels

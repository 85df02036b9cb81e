// Whole-buffer passes bound by memory (elementwise.h).
#include "kernels/isa/isa.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"


namespace attend::kernels::ATTEND_ISA {
namespace {

constexpr int64_t kGrain = 1 << 16;  // below this one thread is faster than waking another

}  // namespace

void fill(float* out, int64_t n, float value) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = value;
  });
}

void scale(float* x, int64_t n, float factor) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) x[i] *= factor;
  });
}

double sum_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kGrain - 1) / kGrain;
  // new[] rather than std::vector: no library template is instantiated in a per-set source (isa/isa.h).
  double* partial = new double[static_cast<size_t>(blocks)];
  parallel_for(blocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* p = x + b * kGrain;
      const int64_t len = b + 1 < blocks ? kGrain : n - b * kGrain;
      partial[b] = vec::sum<float>(len, [&](int64_t i) { return p[i] * p[i]; });
    }
  });
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += partial[b];
  delete[] partial;
  return total;
}

}  // namespace attend::kernels::ATTEND_ISA

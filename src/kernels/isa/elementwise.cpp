// Whole-buffer passes bound by memory (elementwise.h), and sampling's exponentials.
#include "kernels/isa/isa.h"
#include "kernels/isa/lanes.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"


namespace attend::kernels::ATTEND_ISA {
namespace {

constexpr int64_t kGrain = 1 << 16;  // below this one thread is faster than waking another

// Doubles as wide as the set's float register (8 with AVX-512, 4 with AVX2, 2 with SSE2), GCC's vector extension.
constexpr int64_t kDoubles = lanes::kLanes / 2;
using Doubles = double __attribute__((vector_size(kDoubles * sizeof(double))));
using Int64s = int64_t __attribute__((vector_size(kDoubles * sizeof(double))));
using Floats = float __attribute__((vector_size(kDoubles * sizeof(float))));

inline Doubles splat(double v) { return Doubles{} + v; }

// e^x in double for x ≤ 0, lane by lane; NaN stays NaN. x = k·ln 2 + r with k the nearest integer to x/ln 2
// (Cody and Waite: ln 2 in two parts, the first with enough trailing zeros that k times it is exact, so r is
// exact up to the second part's rounding), |r| ≤ ln 2 / 2; e^r by its Taylor series to r¹³ (the remainder
// r¹⁴/14! < 5·10⁻¹⁸ of the result); then times 2^k as two powers of two of half k each, so that each is a
// normal double down to x = −746, where e^x rounds to 0, and the result rounds once where it is subnormal.
// Within 4 units in the last place of the exact value (tests/test_isa_kernels.cpp checks against expl).
inline Doubles exp_nonpositive(Doubles x) {
  const Doubles shift = splat(0x1.8p52);  // adding it rounds to an integer, held in the low bits
  x = x < splat(-746.0) ? splat(-746.0) : x;
  const Doubles t = x * splat(0x1.71547652b82fep0) + shift;
  const Doubles k = t - shift;
  const Int64s ki = __builtin_bit_cast(Int64s, t) - __builtin_bit_cast(Int64s, shift);
  Doubles r = x - k * splat(0x1.62e42fee00000p-1);
  r = r - k * splat(0x1.a39ef35793c76p-33);
  constexpr double kInverseFactorials[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                           1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,      1.0 / 720.0,
                                           1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,         0.5,
                                           1.0,                1.0};
  Doubles p = splat(kInverseFactorials[0]);
#pragma GCC unroll 16
  for (int i = 1; i < 14; ++i) p = p * r + splat(kInverseFactorials[i]);
  const Int64s half = ki >> 1, rest = ki - half;
  const Doubles scale_a = __builtin_bit_cast(Doubles, (half + 1023) << 52);
  const Doubles scale_b = __builtin_bit_cast(Doubles, (rest + 1023) << 52);
  return p * scale_a * scale_b;
}

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

double exp_weights(double* w, const float* z, int64_t n, float top, double inv_t) {
  const Doubles shift = splat(top), scale_by = splat(inv_t);
  Doubles total{};
  int64_t i = 0;
  auto pass = [&](Floats zf) {
    const Doubles x = (__builtin_convertvector(zf, Doubles) - shift) * scale_by;
    Doubles e = exp_nonpositive(x);
    e = e == e ? e : Doubles{};  // NaN: no weight
    total += e;
    return e;
  };
  for (; i + kDoubles <= n; i += kDoubles) {
    Floats zf;
    __builtin_memcpy(&zf, z + i, sizeof zf);
    const Doubles e = pass(zf);
    __builtin_memcpy(w + i, &e, sizeof e);
  }
  if (i < n) {  // the last few, the rest of the register −∞ (weight 0)
    Floats zf = Floats{} - __builtin_inff();
    for (int64_t j = i; j < n; ++j) zf[j - i] = z[j];
    const Doubles e = pass(zf);
    for (int64_t j = i; j < n; ++j) w[j] = e[j - i];
  }
  double sum = 0.0;
  for (int64_t l = 0; l < kDoubles; ++l) sum += total[l];
  return sum;
}

}  // namespace attend::kernels::ATTEND_ISA

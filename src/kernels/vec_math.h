// Elementary functions that vectorize: branch-free float code GCC turns into AVX-512 / AVX2 loops,
// where std::exp and std::tanh are scalar library calls. The double overloads call the C library:
// the fp64 kernels are the tests' oracle and stay exact.
//
// exp: x = k·ln2 + r with k = round(x/ln2) and |r| ≤ ln2/2 (Cody-Waite, ln2 in two parts), then
// e^x = 2^k · e^r with e^r from its Taylor series to r⁷ (truncation error < 6e-9, below float's ulp).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/isa_namespace.h"

namespace attend::kernels::vec {
inline namespace ATTEND_ISA_NAMESPACE {

inline float exp(float x) {
  // NaN comes back as itself. It is replaced by 0 for the arithmetic: converting NaN to an integer (the
  // exponent k below) is undefined behaviour.
  const float input = x;
  const bool nan = x != x;
  x = nan ? 0.0f : x;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to the nearest integer
  const bool underflow = x < -87.33654f;  // e^x below float's smallest normal: return 0 (also for −∞)
  x = x > 88.3762626f ? 88.3762626f : x;  // keeps k ≤ 127: e^88.376 ≈ 2.4e38, still finite
  x = x < -87.33654f ? -87.33654f : x;
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return nan ? input : underflow ? 0.0f : p * scale;
}
inline double exp(double x) { return std::exp(x); }

// tanh(x) = 1 − 2/(e^{2x} + 1): exact limits ±1, absolute error ~1e-7.
inline float tanh(float x) { return 1.0f - 2.0f / (exp(2.0f * x) + 1.0f); }
inline double tanh(double x) { return std::tanh(x); }

// erf, odd in x. For |x| ≥ 0.5, Abramowitz & Stegun 7.1.26: erf(x) = 1 − (a₁t + … + a₅t⁵)e^{−x²},
// t = 1/(1 + p|x|), absolute error ≤ 1.5e-7. Below 0.5 that form loses digits to the cancellation in
// 1 − (…), so the Maclaurin series (2/√π)Σ(−1)ⁿx^{2n+1}/(n!(2n+1)) is used, to x¹⁵ (error < 1e-10).
inline float erf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float large = 1.0f - poly * t * exp(-a * a);
  const float a2 = a * a;
  float series = -1.0f / 75600.0f;  // the coefficients 1/(n!(2n+1)) with alternating signs, n = 7 … 0
  series = series * a2 + 1.0f / 9360.0f;
  series = series * a2 - 1.0f / 1320.0f;
  series = series * a2 + 1.0f / 216.0f;
  series = series * a2 - 1.0f / 42.0f;
  series = series * a2 + 1.0f / 10.0f;
  series = series * a2 - 1.0f / 3.0f;
  series = series * a2 + 1.0f;
  const float small = 1.1283791671f * a * series;  // 2/√π
  const float y = a < 0.5f ? small : large;
  return x < 0.0f ? -y : y;
}
inline double erf(double x) { return std::erf(x); }

// Σ_{j<n} term(j), with term(j) of type T. A double accumulator fed by floats does not vectorize, and
// GCC's `omp simd reduction` keeps its lanes in memory, so the terms go into 32 independent lanes
// (two AVX-512 registers, filled as one unrolled statement GCC turns into vector adds); every 1024
// terms the lanes are added into a double. A block's rounding error is ~1e-7 of its sum.
// `term` may have side effects, e.g. store the value it returns.
template <typename T, typename Term>
double sum(int64_t n, Term&& term) {
  constexpr int64_t kLanes = 32, kBlock = 1024;
  double total = 0.0;
  int64_t j = 0;
  while (j + kLanes <= n) {
    T lanes[kLanes] = {};
    const int64_t block_end = j + kBlock < n ? j + kBlock : n;
    for (; j + kLanes <= block_end; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
    for (int64_t l = 0; l < kLanes; ++l) total += lanes[l];
  }
  for (; j < n; ++j) total += term(j);
  return total;
}

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::vec

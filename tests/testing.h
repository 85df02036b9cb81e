// Helpers shared by the tests: seeded random inputs, finite-difference gradient checks and
// element-wise comparisons that print the first failing index with both values.
#pragma once

#include <attend/rng.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

// Tests of the data scripts/get-data.sh fetches into data/ (GPT-2's vocabulary, the Brown corpus, CMUdict,
// SpamAssassin) skip, saying what is missing and how to get it, where it was not fetched. A macro because
// GTEST_SKIP returns from the test's own body.
#define ATTEND_SKIP_WITHOUT_DATA(relative)                                                        \
  do {                                                                                            \
    if (!std::filesystem::exists(std::filesystem::path(ATTEND_DATA_DIR) / (relative)))           \
      GTEST_SKIP() << "data/" << (relative) << " is missing: run scripts/get-data.sh (setup.sh does)"; \
  } while (false)

namespace attend::testing {

// Central differences in double: the truncation error is O(h²) ≈ 1e-10 for the smooth functions here
// and the rounding error O(ε_machine/h) ≈ 1e-11, so 1e-7 relative separates a right gradient
// (agreement to ~1e-9) from a wrong one (off by O(1)).
inline constexpr double kFiniteDifferenceStep = 1e-5;
inline constexpr double kGradientTolerance = 1e-7;
// fp32 kernels against their fp64 twins: a few ulps of float per reduction of length ≤ 1e3.
inline constexpr double kFloatTolerance = 2e-5;

inline std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = lo + (hi - lo) * rng.uniform_double();
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

template <typename To, typename From>
std::vector<To> cast(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// |a − b| ≤ tolerance · max(1, |a|, |b|): relative for large values, absolute near zero.
inline bool close(double a, double b, double tolerance) {
  return std::abs(a - b) <= tolerance * std::max({1.0, std::abs(a), std::abs(b)});
}

// Expects every element of `actual` to be close to `expected`; reports the first mismatch.
template <typename A, typename B>
void expect_all_close(const std::vector<A>& actual, const std::vector<B>& expected, double tolerance,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": sizes differ";
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close(double(actual[i]), double(expected[i]), tolerance)) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << actual.size() << " elements differ; first at index " << first
                     << ": got " << double(actual[first]) << ", expected " << double(expected[first])
                     << " (tolerance " << tolerance << ")";
}

// Checks `analytic` = ∂loss/∂x against central differences of `loss`, which must recompute the
// scalar from the current contents of `x`. `x` is restored afterwards.
inline void expect_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss, double tolerance = kGradientTolerance) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFiniteDifferenceStep;
    const double plus = loss();
    x[i] = saved - kFiniteDifferenceStep;
    const double minus = loss();
    x[i] = saved;
    numeric[i] = (plus - minus) / (2.0 * kFiniteDifferenceStep);
  }
  loss();  // leave the forward's saved state as it was
  expect_all_close(analytic, numeric, tolerance, "gradient " + what + " (analytic vs finite differences)");
}

// Runs `fn`, expects it to throw E, and checks that each of `needles` appears in the message.
template <typename E, typename F>
void expect_error_mentions(F&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception mentioning " << needles.front();
  } catch (const E& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace attend::testing

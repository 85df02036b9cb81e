#include "testing.h"

#include "kernels/random_fill.h"

#include <attend/rng.h>

#include <cmath>
#include <numbers>
#include <set>

namespace attend {
namespace {

// Random123's published known-answer vectors for Philox4x32-10 (its tests/kat_vectors).
TEST(Rng, PhiloxKnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(123), b(123), c(124);
  std::vector<uint32_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
}

TEST(Rng, StateIsSeedAndOffsetSoItCanBeRestored) {
  Rng a(5);
  for (int i = 0; i < 37; ++i) a.next_u32();
  Rng restored(a.seed(), a.offset());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), restored.next_u32());
  // The stateless form agrees with the sequential one.
  Rng s(9);
  for (uint64_t i = 0; i < 9; ++i) EXPECT_EQ(s.next_u32(), random_u32(9, i));
}

TEST(Rng, UniformAndNormalMoments) {
  Rng rng(2024);
  const int n = 200000;
  double sum = 0, sumsq = 0, nsum = 0, nsumsq = 0;
  for (int i = 0; i < n; ++i) {
    double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sumsq += u * u;
    double z = rng.normal();
    nsum += z;
    nsumsq += z * z;
  }
  // Standard errors: uniform mean 0.29/√n ≈ 6.5e-4, normal mean 1/√n ≈ 2.2e-3; bounds are ~5σ.
  EXPECT_NEAR(sum / n, 0.5, 3.5e-3);
  EXPECT_NEAR(sumsq / n - (sum / n) * (sum / n), 1.0 / 12, 2e-3);
  EXPECT_NEAR(nsum / n, 0.0, 1.2e-2);
  EXPECT_NEAR(nsumsq / n, 1.0, 1.6e-2);
}

TEST(Rng, BelowIsUniformOverSmallRanges) {
  Rng rng(7);
  const int n = 70000, k = 7;
  std::vector<int> counts(k);
  for (int i = 0; i < n; ++i) ++counts[rng.below(k)];
  // Pearson's χ² with 6 degrees of freedom: P(χ² > 22.5) ≈ 0.001.
  double chi2 = 0;
  for (int c : counts) chi2 += (c - 10000.0) * (c - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 22.5);
}

// The range version gives exactly the numbers random_uniform gives, from any starting index.
TEST(Rng, UniformsInARangeEqualOneByOne) {
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{6}, uint64_t{1} << 40}) {
    std::vector<float> range(37);
    random_uniforms(99, first, 37, range.data());
    for (int64_t k = 0; k < 37; ++k) ASSERT_EQ(range[k], random_uniform(99, first + k)) << first << " + " << k;
  }
}

// fill_normal draws its uniforms a Philox block at a time; every value must still be Box-Muller of
// u(seed, offset + 2p) and u(seed, offset + 2p + 1), whatever the batch and thread boundaries. The size is
// odd (the last pair keeps only its cosine) and spans several batches and both threads' chunks.
TEST(Rng, FillNormalIsBoxMullerOfTheIndexedUniforms) {
  const int64_t n = 20001;
  const uint64_t seed = 5, offset = 7;
  std::vector<float> got(n);
  kernels::fill_normal(got.data(), n, 0.5, 2.0, seed, offset);
  double mean = 0.0, square = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = i / 2;
    const double u1 = 1.0 - random_uniform(seed, offset + 2 * p), u2 = random_uniform(seed, offset + 2 * p + 1);
    const double r = std::sqrt(-2.0 * std::log(u1)) * 2.0, a = 2.0 * std::numbers::pi * u2;
    ASSERT_EQ(got[i], static_cast<float>(0.5 + r * (i % 2 == 0 ? std::cos(a) : std::sin(a)))) << i;
    mean += got[i] / double(n);
    square += (got[i] - 0.5) * (got[i] - 0.5) / double(n);
  }
  EXPECT_NEAR(mean, 0.5, 5 * 2.0 / std::sqrt(double(n)));  // standard error 2/√n ≈ 0.014
  EXPECT_NEAR(std::sqrt(square), 2.0, 0.05);
}

}  // namespace
}  // namespace attend

// Kernel values: fp32 against the fp64 oracle, the GEMM backend against plain loops, and the
// properties each operation must have (rows of a softmax sum to one, ALiBi's published slopes, ...).
#include "kernels/activation.h"
#include "kernels/convert.h"
#include "kernels/dropout.h"
#include "kernels/gemm.h"
#include "kernels/lru_cache.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"
#include "kernels/vec_math.h"
#include "testing.h"

#include <attend/runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <tuple>

namespace attend::kernels {
namespace {

using testing::cast;
using testing::expect_all_close;
using testing::kFloatTolerance;
using testing::random_vector;

// gemm<float> (oneDNN) against the plain loops for all four transpose combinations.
void expect_gemm_matches_reference(int64_t M, int64_t N, int64_t K, float alpha, float beta, uint64_t seed,
                                   const std::string& what) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = cast<float>(random_vector(M * K, seed)), b = cast<float>(random_vector(K * N, seed + 1));
      auto c_fast = cast<float>(random_vector(M * N, seed + 2));
      auto c_ref = c_fast;
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      gemm<float>(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c_fast.data(), N);
      gemm_reference<float>(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c_ref.data(), N);
      expect_all_close(c_fast, c_ref, 1e-5, fmt::format("{} trans_a={} trans_b={}", what, ta, tb));
    }
  }
}

TEST(Gemm, OneDnnMatchesReferenceForEveryTransposeAndOddSizes) {
  expect_gemm_matches_reference(37, 29, 131, 0.5f, 2.0f, 1, "gemm");
}

TEST(Gemm, RowSplitAcrossThreadsMatchesReference) {
  // M ≥ 256 · threads takes the path where each thread multiplies its own rows of C.
  const int threads = attend::num_threads();
  attend::set_num_threads(2);
  expect_gemm_matches_reference(700, 45, 70, 1.5f, 1.0f, 4, "split gemm");
  attend::set_num_threads(threads);
}

TEST(Gemm, EmptyInnerDimensionOnlyScales) {
  std::vector<float> c = {1, 2, 3, 4};
  gemm<float>(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 3.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{3, 6, 9, 12}));
}

// Mixed precision (003 §13.2): gemm_half multiplies the rounded operands exactly and sums in fp32, so it
// equals the fp64 product of the operands widened back, to fp32 summation error. Every transpose, beta 0
// and 1, leading dimensions wider than the rows (the same memory strided), and M large enough that oneDNN
// splits the work. bf16 runs twice: through oneDNN's bf16 kernel (where this CPU has one) and through the
// widening path of CPUs without one.
TEST(GemmHalf, EqualsTheProductOfTheRoundedOperandsForBothFormats) {
  for (auto [type, kernel] : {std::pair{Half::BF16, true}, {Half::BF16, false}, {Half::F16, false}}) {
    set_bf16_kernel_enabled(kernel);
    const auto widen = [&](const std::vector<uint16_t>& h) {
      std::vector<float> out(h.size());
      if (type == Half::BF16) bf16_to_float(out.data(), h.data(), static_cast<int64_t>(h.size()));
      else half_to_float(out.data(), h.data(), static_cast<int64_t>(h.size()));
      return out;
    };
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 70}, {300, 48, 96}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (float beta : {0.0f, 1.0f}) {
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5;  // padded rows
            const auto a = cast<float>(random_vector((ta ? K : M) * lda, 7)), b = cast<float>(random_vector((tb ? N : K) * ldb, 8));
            std::vector<uint16_t> ah(a.size()), bh(b.size());
            round_to_half(type, ah.data(), a.data(), static_cast<int64_t>(a.size()));
            round_to_half(type, bh.data(), b.data(), static_cast<int64_t>(b.size()));
            const std::vector<double> aw = cast<double>(widen(ah)), bw = cast<double>(widen(bh));
            const auto c0 = random_vector(M * N, 9);
            std::vector<float> c = cast<float>(c0);
            std::vector<double> want = c0;
            gemm_half(type, ta, tb, M, N, K, ah.data(), lda, bh.data(), ldb, beta, c.data(), N);
            gemm_reference<double>(ta, tb, M, N, K, 1.0, aw.data(), lda, bw.data(), ldb, beta, want.data(), N);
            expect_all_close(c, want, 1e-5,
                             fmt::format("{} (kernel {}) M={} ta={} tb={} beta={}", type == Half::BF16 ? "bf16" : "f16",
                                         kernel, M, ta, tb, beta));
          }
        }
      }
    }
  }
  set_bf16_kernel_enabled(bf16_kernel_preferred());
}

// The LRU map behind the bf16 primitive cache, by hand: capacity 3, keys 1 2 3, then 1 is used, so 4 evicts 2
// (the least recently used), and 5 evicts 3.
TEST(LruCache, KeepsTheCapacityAndEvictsTheLeastRecentlyUsed) {
  LruCache<int, std::string> cache(3);
  EXPECT_EQ(cache.find(1), nullptr);
  for (int k : {1, 2, 3}) cache.insert(k, std::to_string(k));
  EXPECT_EQ(cache.size(), 3u);
  ASSERT_NE(cache.find(1), nullptr);
  EXPECT_EQ(*cache.find(1), "1");
  EXPECT_EQ(cache.insert(4, "4"), "4");
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find(2), nullptr) << "2 was the least recently used";
  cache.insert(5, "5");
  EXPECT_EQ(cache.find(3), nullptr);
  for (int k : {1, 4, 5}) EXPECT_NE(cache.find(k), nullptr) << k;
  EXPECT_EQ(cache.size(), 3u);
}

// The bf16 primitive cache keeps the kBf16MatmulCacheCapacity most recently used shapes: prompts of 100
// lengths leave it full, not 100 long, and a shape evicted and made again gives the same numbers.
TEST(GemmHalf, PrimitiveCacheIsBoundedAndEvictsTheLeastRecentlyUsed) {
  set_bf16_kernel_enabled(true);
  const int64_t N = 8, K = 16, max_M = 100;
  std::vector<uint16_t> a(max_M * K), b(K * N);
  const auto av = cast<float>(random_vector(a.size(), 3)), bv = cast<float>(random_vector(b.size(), 4));
  round_to_half(Half::BF16, a.data(), av.data(), static_cast<int64_t>(a.size()));
  round_to_half(Half::BF16, b.data(), bv.data(), static_cast<int64_t>(b.size()));
  auto product = [&](int64_t M) {
    std::vector<float> c(M * N);
    gemm_half(Half::BF16, false, false, M, N, K, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    return c;
  };
  const std::vector<float> first = product(1);
  if (bf16_matmul_cache_stats().size == 0) GTEST_SKIP() << "oneDNN has no bf16 matmul for this CPU";
  for (int64_t M = 1; M <= max_M; ++M) {
    product(M);
    ASSERT_LE(bf16_matmul_cache_stats().size, kBf16MatmulCacheCapacity) << "after M = " << M;
  }
  EXPECT_EQ(bf16_matmul_cache_stats().size, kBf16MatmulCacheCapacity);
  // M = 1 was evicted (36 shapes ago): it is made again, with the same numbers.
  size_t made = bf16_matmul_cache_stats().made;
  EXPECT_EQ(product(1), first);
  EXPECT_EQ(bf16_matmul_cache_stats().made, made + 1) << "M = 1 should have been evicted";
  // Now the most recently used, it survives 63 new shapes; M = 50, used least recently, does not.
  for (int64_t M = max_M + 1; M < max_M + 64; ++M) product(M);
  made = bf16_matmul_cache_stats().made;
  product(1);
  EXPECT_EQ(bf16_matmul_cache_stats().made, made) << "M = 1 was evicted though recently used";
  product(50);
  EXPECT_EQ(bf16_matmul_cache_stats().made, made + 1) << "M = 50 should have been evicted";
  set_bf16_kernel_enabled(bf16_kernel_preferred());
}

// Rounding to bf16 vectorised and threaded gives the scalar rule everywhere: nearest, ties to even, NaN quiet.
// fp16's range is what loss scaling is for: 65520 overflows to infinity, and a gradient of 1e-8 underflows to
// zero unless the loss scale (2^16) lifts it into range.
TEST(GemmHalf, RoundingToBf16AndFp16AtTheEdges) {
  const std::vector<float> x = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.0f, INFINITY, std::numeric_limits<float>::quiet_NaN(),
                                3.0e38f, 1.0e-40f};
  std::vector<uint16_t> h(x.size());
  float_to_bf16(h.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(h[0], 0x3F80);  // 1: the tie goes to the even mantissa
  EXPECT_EQ(h[1], 0x3F82);  // 1 + 2^-6
  EXPECT_EQ(h[2], 0x8000);
  EXPECT_EQ(h[3], 0x7F80);
  EXPECT_EQ(h[4] & 0x7FC0, 0x7FC0);  // still a NaN, and quiet
  EXPECT_EQ(h[5], 0x7F62);  // 3e38 = 0x7F61B1E6 rounds up in the mantissa, not to infinity
  EXPECT_EQ(h[6], 0x0001);  // subnormals are kept (1e-40 = 0x000116C2)
  std::vector<float> big(100000, 1.0f + 3 * 0x1p-8f);  // enough for both threads
  std::vector<uint16_t> hb(big.size());
  float_to_bf16(hb.data(), big.data(), static_cast<int64_t>(big.size()));
  EXPECT_EQ(std::count(hb.begin(), hb.end(), uint16_t{0x3F82}), static_cast<long>(big.size()));

  const std::vector<float> f = {65504.0f, 65520.0f, 1e-8f, 1e-8f * 65536.0f};
  std::vector<uint16_t> fh(f.size());
  round_to_half(Half::F16, fh.data(), f.data(), 4);
  std::vector<float> back(4);
  half_to_float(back.data(), fh.data(), 4);
  EXPECT_EQ(back[0], 65504.0f);
  EXPECT_TRUE(std::isinf(back[1]));
  EXPECT_EQ(back[2], 0.0f);
  EXPECT_NEAR(back[3], 1e-8 * 65536.0, 1e-3 * 1e-8 * 65536.0);
}

TEST(Matmul, FloatMatchesDoubleForwardAndBackward) {
  const int64_t N = 33, C = 65, OC = 17;
  auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3), up = random_vector(N * OC, 4);
  std::vector<double> out(N * OC), dx(N * C), dw(OC * C), db(OC);
  matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  matmul_backward(dx.data(), dw.data(), db.data(), up.data(), x.data(), w.data(), N, C, OC);
  auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b), upf = cast<float>(up);
  std::vector<float> outf(N * OC), dxf(N * C), dwf(OC * C), dbf(OC);
  matmul_forward(outf.data(), xf.data(), wf.data(), bf.data(), N, C, OC);
  matmul_backward(dxf.data(), dwf.data(), dbf.data(), upf.data(), xf.data(), wf.data(), N, C, OC);
  expect_all_close(outf, out, kFloatTolerance, "out");
  expect_all_close(dxf, dx, kFloatTolerance, "dinp");
  expect_all_close(dwf, dw, kFloatTolerance, "dweight");
  expect_all_close(dbf, db, kFloatTolerance, "dbias");
}

// Decoding's path: up to kGemvRows rows take the dot-product gemv, whose channels the threads share (an own
// contiguous part each, then a shared tail in chunks). Against the fp64 oracle, with and without threads,
// for a size that runs on one thread and one that is shared, an inner size with a scalar tail (77), and
// bf16 weights against the same product of the rounded weights. One and two threads give the same bits.
TEST(Matmul, DecodeGemvMatchesDoubleForAnyThreadCount) {
  const int threads = attend::num_threads();
  for (int64_t OC : {300, 1003}) {
    for (int64_t N = 1; N <= kGemvRows; ++N) {
      const int64_t C = 77;
      auto x = random_vector(N * C, 5), w = random_vector(OC * C, 6), b = random_vector(OC, 7);
      std::vector<double> want(N * OC);
      matmul_forward(want.data(), x.data(), w.data(), b.data(), N, C, OC);
      auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b);
      std::vector<uint16_t> w16(OC * C);
      float_to_bf16(w16.data(), wf.data(), OC * C);
      std::vector<float> w_rounded(OC * C);
      bf16_to_float(w_rounded.data(), w16.data(), OC * C);
      std::vector<double> want_bf16(N * OC);
      matmul_forward(want_bf16.data(), x.data(), cast<double>(w_rounded).data(), b.data(), N, C, OC);
      std::vector<float> got[2], got_bf16[2];
      for (int t : {1, 2}) {
        attend::set_num_threads(t);
        got[t - 1].resize(N * OC), got_bf16[t - 1].resize(N * OC);
        matmul_forward(got[t - 1].data(), xf.data(), wf.data(), bf.data(), N, C, OC);
        matmul_forward_bf16(got_bf16[t - 1].data(), xf.data(), w16.data(), bf.data(), N, C, OC);
      }
      attend::set_num_threads(threads);
      const std::string what = fmt::format("N={} OC={}", N, OC);
      expect_all_close(got[1], want, kFloatTolerance, what);
      expect_all_close(got_bf16[1], want_bf16, kFloatTolerance, what + " bf16");
      EXPECT_EQ(got[0], got[1]) << what;
      EXPECT_EQ(got_bf16[0], got_bf16[1]) << what;
    }
  }
}

// The row-invariant gemv (a server's batched decoding step): each weight row is loaded once for several input
// rows, and each output is still the same bits as the row's one-row product, for every count of rows (the passes
// of 8, 4, 2 and 1 rows), every weight type and an inner size with a scalar tail (the one-row product is
// checked against fp64 above). 4099 channels make 16-bit rows long enough (≥ 8 KiB) that one input row takes
// eight weight rows a pass, with 37 channels leaving five to the one-row kernel. Input rows that fill L1 (eight of
// 1,031 channels, four of 4,099) take blocks of four input rows and three weight rows on AVX-512, with one weight
// row and up to three input rows left over. From 32 rows of up to about 1,100 channels, on AVX-512, each group of
// three weight rows is widened into fp32 once for blocks of four input rows, the input rows in tiles of 1 MiB
// (252 rows of 1,031 channels: 260 make a whole tile and a short one). On AVX2, from four rows, blocks of three
// weight rows (37 and 38 leave one and two) and groups of three and two input rows in tiles of 24 (40 = 24 + 5·3 + 1
// takes the last four rows as two twos; 25 and 49 leave a tile of one row), the channels in chunks of 96 for fp32
// and 256 for 16-bit rows (64: one short chunk; 800: a short last chunk; 1,031 and 4,099: several and a tail; 20:
// the tail alone).
TEST(Matmul, RowsOfAGemvAreTheirOneRowResults) {
  for (int64_t OC : {37, 38}) {
    for (int64_t C : {20, 64, 77, 768, 800, 1031, 4099}) {
      for (int64_t N : {1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 19, 25, 40, 49, 67, 260}) {
        auto x = random_vector(N * C, 8), w = random_vector(OC * C, 9), b = random_vector(OC, 10);
        auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b);
        std::vector<uint16_t> w_bf16(OC * C), w_f16(OC * C);
        float_to_bf16(w_bf16.data(), wf.data(), OC * C);
        float_to_half(w_f16.data(), wf.data(), OC * C);
        using Gemv = std::function<void(float*, const float*, int64_t)>;
        const std::pair<const char*, Gemv> kinds[] = {
            {"f32", [&](float* o, const float* in, int64_t n) { matmul_forward_rows(o, in, wf.data(), bf.data(), n, C, OC); }},
            {"bf16", [&](float* o, const float* in, int64_t n) { matmul_forward_bf16(o, in, w_bf16.data(), bf.data(), n, C, OC); }},
            {"f16", [&](float* o, const float* in, int64_t n) { matmul_forward_f16(o, in, w_f16.data(), bf.data(), n, C, OC); }}};
        for (const auto& [kind, gemv] : kinds) {
          const std::string what = fmt::format("{} N={} C={} OC={}", kind, N, C, OC);
          std::vector<float> all(N * OC), one(OC);
          gemv(all.data(), xf.data(), N);
          for (int64_t n = 0; n < N; ++n) {
            gemv(one.data(), xf.data() + n * C, 1);
            ASSERT_EQ(std::memcmp(one.data(), all.data() + n * OC, OC * sizeof(float)), 0) << what << " row " << n;
          }
        }
      }
    }
  }
  // No input channels: every output is its bias, on the paths for many rows too (one divided by the row length).
  const int64_t N = 40, OC = 37;
  const std::vector<float> bias = cast<float>(random_vector(OC, 11)), input(1), weight(1);
  const std::vector<uint16_t> half(1);
  std::vector<float> out(N * OC, -1.0f);
  matmul_forward_f16(out.data(), input.data(), half.data(), bias.data(), N, 0, OC);
  for (int64_t i = 0; i < N * OC; ++i) ASSERT_EQ(out[i], bias[i % OC]) << "f16, C = 0, at " << i;
  std::fill(out.begin(), out.end(), -1.0f);
  matmul_forward_rows(out.data(), input.data(), weight.data(), bias.data(), N, 0, OC);
  for (int64_t i = 0; i < N * OC; ++i) ASSERT_EQ(out[i], bias[i % OC]) << "f32, C = 0, at " << i;
}

TEST(Norm, FloatLayerNormAndRMSNormMatchDouble) {
  const int64_t N = 9, C = 257;
  auto x = random_vector(N * C, 1, -5, 7), w = random_vector(C, 2), b = random_vector(C, 3);
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b);
  std::vector<float> outf(N * C), meanf(N), rstdf(N);
  layernorm_forward(outf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
  expect_all_close(outf, out, kFloatTolerance, "layernorm");
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
  rmsnorm_forward(outf.data(), rstdf.data(), xf.data(), wf.data(), N, C, 1e-6f);
  expect_all_close(outf, out, kFloatTolerance, "rmsnorm");
}

TEST(Norm, LayerNormOutputHasZeroMeanUnitVariance) {
  const int64_t N = 4, C = 64;
  auto x = random_vector(N * C, 7, 100, 103);  // a large mean: the two-pass variance must not cancel
  std::vector<double> w(C, 1.0), out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), static_cast<double*>(nullptr), N, C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += out[n * C + c] / C;
    for (int64_t c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-9);
  }
}

TEST(Softmax, RowsSumToOneAndFloatMatchesDouble) {
  const int64_t N = 5, V = 1000;
  auto z = random_vector(N * V, 1, -20, 20);
  std::vector<double> p(N * V);
  softmax_forward(p.data(), z.data(), N, V, 0.7);
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(std::accumulate(p.begin() + n * V, p.begin() + (n + 1) * V, 0.0), 1.0, 1e-12);
  auto zf = cast<float>(z);
  std::vector<float> pf(N * V);
  softmax_forward(pf.data(), zf.data(), N, V, 0.7f);
  expect_all_close(pf, p, kFloatTolerance, "softmax");
}

TEST(Softmax, FullyMaskedRowGivesZerosNotNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> z = {-inf, -inf, -inf, 1.0f, -inf, 1.0f};
  std::vector<float> p(6);
  softmax_forward(p.data(), z.data(), 2, 3, 1.0f);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  EXPECT_EQ(p[4], 0.0f);
  std::vector<float> dp = {1, 2, 3, 1, 2, 3}, dz(6);
  softmax_backward(dz.data(), dp.data(), p.data(), 2, 3, 1.0f);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(dz[j], 0.0f);
}

TEST(Softmax, TemperatureSharpensAndFlattens) {
  std::vector<double> z = {1.0, 2.0, 3.0}, cold(3), hot(3);
  softmax_forward(cold.data(), z.data(), 1, 3, 0.01);
  softmax_forward(hot.data(), z.data(), 1, 3, 1000.0);
  EXPECT_NEAR(cold[2], 1.0, 1e-12);          // τ → 0: argmax
  for (double p : hot) EXPECT_NEAR(p, 1.0 / 3, 1e-3);  // τ → ∞: uniform
}

TEST(LogSoftmax, EqualsLogOfSoftmax) {
  const int64_t N = 3, V = 17;
  auto z = random_vector(N * V, 2, -5, 5);
  std::vector<double> p(N * V), logp(N * V);
  softmax_forward(p.data(), z.data(), N, V, 1.0);
  log_softmax_forward(logp.data(), z.data(), N, V);
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(logp[i], std::log(p[i]), 1e-12);
}

TEST(Activations, FloatMatchesDoubleAndKnownValues) {
  auto x = random_vector(1001, 3, -6, 6);
  auto xf = cast<float>(x);
  for (Activation a : {Activation::ReLU, Activation::GELU, Activation::GELUTanh, Activation::SiLU}) {
    std::vector<double> y(x.size());
    std::vector<float> yf(x.size());
    activation_forward(a, y.data(), x.data(), static_cast<int64_t>(x.size()));
    activation_forward(a, yf.data(), xf.data(), static_cast<int64_t>(x.size()));
    expect_all_close(yf, y, kFloatTolerance, activation_name(a));
  }
  // GELU(1) = Φ(1) = 0.841344746..., SiLU(1) = σ(1) = 0.731058578...; the tanh form is within 1e-3.
  double one = 1.0, y = 0.0;
  activation_forward(Activation::GELU, &y, &one, 1);
  EXPECT_NEAR(y, 0.8413447460685429, 1e-15);
  activation_forward(Activation::SiLU, &y, &one, 1);
  EXPECT_NEAR(y, 0.7310585786300049, 1e-15);
  activation_forward(Activation::GELUTanh, &y, &one, 1);
  EXPECT_NEAR(y, 0.8413447460685429, 1e-3);
}

TEST(Dropout, KeepsAboutOneMinusPAndPreservesTheMean) {
  const int64_t n = 200000;
  std::vector<float> x(n, 1.0f), y(n);
  dropout_forward(y.data(), x.data(), n, 0.25f, 7, 0);
  int64_t kept = 0;
  double sum = 0;
  for (float v : y) {
    kept += v != 0.0f;
    sum += v;
    ASSERT_TRUE(v == 0.0f || v == 1.0f / 0.75f);
  }
  // Binomial(n, 0.75): standard deviation √(n·0.75·0.25) ≈ 194, so ±1000 is over 5σ.
  EXPECT_NEAR(static_cast<double>(kept), 0.75 * n, 1000.0);
  EXPECT_NEAR(sum / n, 1.0, 0.01);
}

TEST(Dropout, ZeroAndOneAndSameMaskForAnyThreadCount) {
  const int64_t n = 100000;
  std::vector<float> x(n, 2.0f), y(n);
  dropout_forward(y.data(), x.data(), n, 0.0f, 1, 0);
  EXPECT_EQ(y, x);
  dropout_forward(y.data(), x.data(), n, 1.0f, 1, 0);
  EXPECT_EQ(y, std::vector<float>(n, 0.0f));
  const int threads = attend::num_threads();
  std::vector<float> one(n), many(n);
  attend::set_num_threads(1);
  dropout_forward(one.data(), x.data(), n, 0.5f, 99, 12345);
  attend::set_num_threads(2);
  dropout_forward(many.data(), x.data(), n, 0.5f, 99, 12345);
  attend::set_num_threads(threads);
  EXPECT_EQ(one, many);
}

TEST(Positions, AlibiSlopesArePublishedGeometricSequences) {
  std::vector<double> s8(8), s12(12);
  alibi_slopes(s8.data(), 8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s8[h], std::pow(2.0, -(h + 1)));  // 1/2, 1/4, ..., 1/256
  alibi_slopes(s12.data(), 12);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s12[h], std::pow(2.0, -(h + 1)));
  // The 4 extra heads take every other slope of the 16-head sequence: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  for (int h = 8; h < 12; ++h) EXPECT_DOUBLE_EQ(s12[h], std::pow(2.0, -0.5 - (h - 8)));
}

TEST(Positions, AlibiBiasIsMinusSlopeTimesDistance) {
  const int64_t H = 2, Tq = 3, Tk = 5;
  double slopes[2] = {0.5, 0.25};
  std::vector<double> scores(H * Tq * Tk, 1.0);
  alibi_bias_forward(scores.data(), slopes, H, Tq, Tk, 2);  // queries at positions 2, 3, 4
  EXPECT_DOUBLE_EQ(scores[0 * Tk + 0], 1.0 - 0.5 * 2);      // head 0, query pos 2, key 0
  EXPECT_DOUBLE_EQ(scores[2 * Tk + 4], 1.0);                // head 0, query pos 4, key 4
  EXPECT_DOUBLE_EQ(scores[(Tq + 1) * Tk + 0], 1.0 - 0.25 * 3);  // head 1, query pos 3, key 0
}

TEST(Positions, T5BucketsMatchTheReferenceImplementation) {
  // Values of Hugging Face's T5Attention._relative_position_bucket (worked by hand, and checked
  // against PyTorch in test_torch_golden.cpp).
  EXPECT_EQ(t5_relative_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(t5_relative_bucket(-1, true, 32, 128), 1);
  EXPECT_EQ(t5_relative_bucket(1, true, 32, 128), 17);
  EXPECT_EQ(t5_relative_bucket(-7, true, 32, 128), 7);
  EXPECT_EQ(t5_relative_bucket(-8, true, 32, 128), 8);      // first logarithmic bucket
  EXPECT_EQ(t5_relative_bucket(-20, true, 32, 128), 10);    // 8 + ⌊log(20/8)/log(16)·8⌋
  EXPECT_EQ(t5_relative_bucket(-200, true, 32, 128), 15);   // clamped to the last bucket
  EXPECT_EQ(t5_relative_bucket(200, true, 32, 128), 31);
  EXPECT_EQ(t5_relative_bucket(5, false, 32, 128), 0);      // causal: the future is bucket 0
  EXPECT_EQ(t5_relative_bucket(-20, false, 32, 128), 17);   // 16 + ⌊log(20/16)/log(8)·16⌋
  EXPECT_EQ(t5_relative_bucket(-200, false, 32, 128), 31);
}

TEST(Positions, RopeScalingFormulas) {
  const int64_t d = 64;
  RopeScaling plain;
  EXPECT_DOUBLE_EQ(rope_frequency(0, d, plain), 1.0);
  EXPECT_NEAR(rope_frequency(16, d, plain), std::pow(10000.0, -0.5), 1e-15);
  RopeScaling base;  // base scaling by α = 4: θ_i = (4·10000)^(−2i/d)
  base.base_scale = 4.0;
  EXPECT_NEAR(rope_frequency(16, d, base), std::pow(40000.0, -0.5), 1e-15);
  RopeScaling ntk;  // NTK-aware by s = 8: base' = 10000·8^(d/(d−2)); the lowest frequency shrinks by ≈ 8
  ntk.ntk_factor = 8.0;
  EXPECT_NEAR(rope_frequency(d / 2 - 1, d, ntk), rope_frequency(d / 2 - 1, d, plain) / 8.0, 1e-18);
  EXPECT_DOUBLE_EQ(rope_frequency(0, d, ntk), 1.0);  // the highest frequency is untouched
}

TEST(Similarity, MipsTopKMatchesBruteForce) {
  const int64_t M = 5, N = 300, C = 16, k = 7;
  auto q = cast<float>(random_vector(M * C, 1)), keys = cast<float>(random_vector(N * C, 2));
  std::vector<int32_t> idx(M * k);
  std::vector<float> scores(M * k), scratch(M * N);
  mips_topk(idx.data(), scores.data(), scratch.data(), q.data(), keys.data(), M, N, C, k);
  for (int64_t m = 0; m < M; ++m) {
    std::vector<std::pair<double, int32_t>> all;
    for (int32_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += double{q[m * C + c]} * keys[j * C + c];
      all.push_back({-s, j});
    }
    std::sort(all.begin(), all.end());
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(idx[m * k + i], all[i].second) << "query " << m << " rank " << i;
      EXPECT_NEAR(scores[m * k + i], -all[i].first, 1e-5);
    }
  }
}

}  // namespace
}  // namespace attend::kernels

namespace attend::kernels {
namespace {

// The vectorizable float functions against the C library in double, over their whole useful range.
TEST(VecMath, FloatExpTanhErfAccuracy) {
  double worst_exp = 0, worst_tanh = 0, worst_erf = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2000000.0f;
    const double e = std::exp(double{x});
    worst_exp = std::max(worst_exp, std::abs(vec::exp(x) - e) / e);
    const float t = x / 8.0f;  // tanh and erf saturate beyond |x| ≈ 10
    worst_tanh = std::max(worst_tanh, std::abs(vec::tanh(t) - std::tanh(double{t})));
    worst_erf = std::max(worst_erf, std::abs(vec::erf(t) - std::erf(double{t})));
  }
  EXPECT_LT(worst_exp, 3e-7);   // ≈ 2.5 ulp
  EXPECT_LT(worst_tanh, 3e-7);  // absolute
  EXPECT_LT(worst_erf, 4e-7);   // absolute: A&S 7.1.26 is within 1.5e-7; float evaluation adds up to
                                // ~2e-7 more without FMA (3.5e-7 measured in the sanitizer build)
  EXPECT_EQ(vec::exp(0.0f), 1.0f);
  EXPECT_EQ(vec::exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(vec::exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(vec::exp(100.0f)));
  EXPECT_EQ(vec::tanh(50.0f), 1.0f);
  EXPECT_EQ(vec::tanh(-50.0f), -1.0f);
}

TEST(VecMath, BlockedSumIsAccurateOverLongRows) {
  // 1e6 terms of 0.1f: a naive float running sum is off by ~1%; the blocked sum must not be.
  const int64_t n = 1000000;
  const double total = vec::sum<float>(n, [](int64_t) { return 0.1f; });
  EXPECT_NEAR(total, n * double{0.1f}, 1e-6 * n);
  EXPECT_DOUBLE_EQ(vec::sum<float>(5, [](int64_t j) { return float(j); }), 10.0);  // shorter than one lane group
}

}  // namespace
}  // namespace attend::kernels

// The kernels compiled once per instruction set (src/kernels/isa/), each set's table against an oracle
// that does not depend on it: fp64 sums, the exact values of the 16-bit formats, scalar double updates.
// Every set is a test instance; a set this CPU cannot run is skipped with the reason. (CTest also runs the
// kernel suites with each set active: tests/CMakeLists.txt.)
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "testing.h"

#include <attend/runtime.h>
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>

namespace attend::kernels {
namespace {

using testing::random_vector;

class IsaKernels : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > cpu_isa())
      GTEST_SKIP() << "this CPU cannot run the " << isa_name(GetParam()) << " kernels (it has up to "
                   << isa_name(cpu_isa()) << ")";
  }
  const KernelTable& table() const { return kernel_table(GetParam()); }
};

// fp32's unit roundoff and the bound γ_n = n·u/(1 − n·u) on the relative error of an n-term sum.
constexpr double kUnit = 0x1p-24;
double gamma(int64_t n) { return n * kUnit / (1 - n * kUnit); }

// The exact value of an IEEE half, from its fields.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST_P(IsaKernels, TableIsTheSetsOwn) { EXPECT_EQ(table().isa, GetParam()); }

TEST_P(IsaKernels, HalfWidensExactlyForEveryBitPattern) {
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  table().half_to_float(out.data(), all.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    const double want = half_value(all[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(out[i])) << "half 0x" << std::hex << i;
      // A quiet NaN, with the payload kept: the half's 10 mantissa bits are the float's top 10, quiet bit set.
      EXPECT_EQ((std::bit_cast<uint32_t>(out[i]) >> 13) & 0x3FF, (i & 0x3FF) | 0x200) << "half 0x" << std::hex << i;
    } else {
      ASSERT_EQ(double(out[i]), want) << "half 0x" << std::hex << i;
      EXPECT_EQ(std::signbit(out[i]), (i & 0x8000) != 0) << "half 0x" << std::hex << i;
    }
  }
}

// Round to nearest, ties to even, by brute force: the two halves around x, and the even one on a tie.
uint16_t nearest_half(float x) {
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a >= 65520.0) return sign | 0x7C00;  // halfway past the largest half, 65504
  uint16_t lo = 0;
  for (uint16_t step = 0x4000; step > 0; step >>= 1)  // the largest half ≤ a (halves are ordered as integers)
    if (lo + step <= 0x7BFF && half_value(lo + step) <= a) lo += step;
  if (half_value(lo) == a) return sign | lo;
  const double below = a - half_value(lo), above = half_value(lo + 1) - a;
  const uint16_t pick = below < above ? lo : above < below ? lo + 1 : (lo & 1) == 0 ? lo : lo + 1;
  return sign | pick;
}

TEST_P(IsaKernels, FloatNarrowsToTheNearestHalfTiesToEven) {
  std::vector<float> x;
  for (int e = -27; e <= 17; ++e)  // every binade a half can round into, with the ties and their neighbours
    for (float m : {1.0f, 1.0009765625f, 1.00048828125f, 1.0014648438f, 1.5f, 1.99951171875f, 1.9997558594f, 1.999f})
      for (float s : {1.0f, -1.0f}) x.push_back(s * std::ldexp(m, e));
  for (float special : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f,
                        0x1.ff8p-15f, 0x1.ffcp-15f, INFINITY, -INFINITY, NAN})
    x.push_back(special);
  const auto random = random_vector(20000, 11, -70000.0, 70000.0);
  const auto tiny = random_vector(20000, 12, -1e-4, 1e-4);
  for (double r : random) x.push_back(static_cast<float>(r));
  for (double r : tiny) x.push_back(static_cast<float>(r));
  std::vector<uint16_t> out(x.size());
  table().float_to_half(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE((out[i] & 0x7C00) == 0x7C00 && (out[i] & 0x3FF) != 0) << "NaN gave 0x" << std::hex << out[i];
      continue;
    }
    ASSERT_EQ(out[i], nearest_half(x[i])) << "x = " << x[i] << " (" << std::hexfloat << x[i] << ")";
  }
}

TEST_P(IsaKernels, Bf16RoundsToNearestEvenAndWidensExactly) {
  const std::vector<float> x = {1.0f, std::bit_cast<float>(0x3F808000u), std::bit_cast<float>(0x3F818000u),
                                std::bit_cast<float>(0x3F808001u), -2.5f, 0x1p-130f, INFINITY, NAN};
  const std::vector<uint16_t> want = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x0008, 0x7F80};
  std::vector<uint16_t> out(x.size());
  table().float_to_bf16(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "x = " << std::hexfloat << x[i];
  EXPECT_EQ(out.back() & 0x7FC0, 0x7FC0) << "NaN stays a quiet NaN";
  std::vector<float> back(x.size());
  table().bf16_to_float(back.data(), out.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t{want[i]} << 16);
}

// Decoding's matmul for each weight type, against the fp64 product of the stored weights' exact values.
// An fp32 sum of C products has error at most γ_C·Σ|x·w| (each product rounds once and each addition once,
// whatever the order); the bias adds one more rounding of the result. 4100 channels: 16-bit rows of 8 KiB and more,
// which one input row reads eight at a time.
TEST_P(IsaKernels, GemvMatchesTheExactProductWithinTheSumsBound) {
  for (const int64_t C : {77, 768, 4100}) {
    const int64_t OC = 600;  // shared between threads
    for (int64_t N = 1; N <= kGemvRows; ++N) {
      const auto x = random_vector(N * C, 21, -2, 2), w = random_vector(OC * C, 22), b = random_vector(OC, 23);
      std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
      std::vector<uint16_t> w_bf16(OC * C), w_f16(OC * C);
      table().float_to_bf16(w_bf16.data(), wf.data(), OC * C);
      table().float_to_half(w_f16.data(), wf.data(), OC * C);
      struct Case {
        const char* name;
        std::function<void(float*)> run;
        std::function<double(int64_t)> weight;
      };
      const Case cases[] = {
          {"fp32", [&](float* out) { table().gemv_f32(out, xf.data(), wf.data(), bf.data(), N, C, OC); },
           [&](int64_t i) { return double(wf[i]); }},
          {"bf16", [&](float* out) { table().gemv_bf16(out, xf.data(), w_bf16.data(), bf.data(), N, C, OC); },
           [&](int64_t i) { return double(std::bit_cast<float>(uint32_t{w_bf16[i]} << 16)); }},
          {"fp16", [&](float* out) { table().gemv_f16(out, xf.data(), w_f16.data(), bf.data(), N, C, OC); },
           [&](int64_t i) { return half_value(w_f16[i]); }},
      };
      for (const Case& c : cases) {
        // With and without software prefetch (kernels/cpu.h: which one a CPU takes): the same bits.
        const bool chosen = gemv_prefetch();
        std::vector<float> out(N * OC), other(N * OC);
        set_gemv_prefetch(!chosen);
        c.run(other.data());
        set_gemv_prefetch(chosen);
        c.run(out.data());
        for (int64_t i = 0; i < N * OC; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(other[i]))
              << c.name << " weights, C=" << C << " N=" << N << ": prefetching changed output " << i;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t o = 0; o < OC; ++o) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t k = 0; k < C; ++k) {
              const double product = double(xf[n * C + k]) * c.weight(o * C + k);
              exact += product, magnitude += std::fabs(product);
            }
            const double bound = gamma(C) * magnitude + kUnit * (std::fabs(exact) + magnitude + std::fabs(bf[o]));
            ASSERT_NEAR(out[n * OC + o], exact + bf[o], bound)
                << c.name << " weights, C=" << C << " N=" << N << " row " << n << " channel " << o;
          }
        }
      }
    }
  }
}

// AdamW's update of one element in double from the same float inputs: the kernel's float arithmetic is a
// handful of roundings (about 10 operations) away from it, each relative error ≤ u.
TEST_P(IsaKernels, AdamFollowsItsFormulaInDouble) {
  const int64_t n = 100003;  // more than one thread's grain, and an odd tail
  const auto p0 = random_vector(n, 31), m0 = random_vector(n, 32, -0.1, 0.1), v0 = random_vector(n, 33, 0, 0.01),
             g0 = random_vector(n, 34);
  std::vector<float> param(p0.begin(), p0.end()), m(m0.begin(), m0.end()), v(v0.begin(), v0.end()), g(g0.begin(), g0.end());
  const AdamStep s{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .gain1 = 0.1f, .gain2 = 0.001f,
                   .correction1 = 1 - std::pow(0.9, 3), .correction2 = 1 - std::pow(0.999, 3), .l2 = 0.0f,
                   .decoupled = 0.1f};
  table().adam_update(param.data(), m.data(), v.data(), g.data(), n, s);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = float(g0[i]);
    const double mi = double(s.beta1) * float(m0[i]) + double(s.gain1) * gi;
    const double vi = double(s.beta2) * float(v0[i]) + double(s.gain2) * gi * gi;
    const double update = double(s.lr) / s.correction1 * mi / (std::sqrt(vi / s.correction2) + s.eps);
    const double want = (1 - double(s.lr) * s.decoupled) * float(p0[i]) - update;
    ASSERT_NEAR(m[i], mi, 4 * kUnit * (std::fabs(mi) + std::fabs(gi)) + 1e-30) << "m at " << i;
    ASSERT_NEAR(v[i], vi, 4 * kUnit * (std::fabs(vi) + gi * gi) + 1e-30) << "v at " << i;
    ASSERT_NEAR(param[i], want, 4 * kUnit * std::fabs(float(p0[i])) + 12 * kUnit * std::fabs(update)) << "param at " << i;
  }
}

TEST_P(IsaKernels, SumOfSquaresAndScaleAndFill) {
  const int64_t n = 300007;
  const auto x = random_vector(n, 41, -3, 3);
  std::vector<float> xf(x.begin(), x.end());
  double exact = 0.0;
  for (float value : xf) exact += double(value) * value;
  // Blocks of 1024 floats summed in float lanes (32 terms each), the blocks in double.
  EXPECT_NEAR(table().sum_squares(xf.data(), n), exact, gamma(1024 / 32 + 1) * exact);
  std::vector<float> scaled = xf;
  table().scale(scaled.data(), n, 0.5f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], xf[i] * 0.5f);
  table().fill(scaled.data(), n, 3.25f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], 3.25f);
}

// Sampling's weights e^{(z − top)·inv_t} in double against the long double exponential of the same argument:
// within 4 units in the last place where the result is normal (the Taylor polynomial's Horner steps round a few
// times), within one subnormal step below; e^0 exactly 1; −∞ and arguments below −746 give 0; NaN gives 0 and no
// share of the sum. Lengths that end inside a register, temperatures of 0.2 to 5.
TEST_P(IsaKernels, SamplingWeightsAreTheExponentialInDouble) {
  const double ulp = 0x1p-52;
  for (const double inv_t : {1.0, 1.0 / 0.7, 5.0, 0.2}) {
    const int64_t n = 1003;
    const auto r = random_vector(n, 43, -40, 0);
    std::vector<float> z(r.begin(), r.end());
    const float top = 1.5f;
    for (float& v : z) v += top;
    z[0] = top;
    z[1] = -std::numeric_limits<float>::infinity();
    z[2] = std::numeric_limits<float>::quiet_NaN();
    const float deep[] = {-140.0f, -141.7f, -144.0f, -148.5f, -149.1f, -149.3f, -150.0f, -1e30f};
    for (int i = 0; i < 8; ++i) z[3 + i] = static_cast<float>(deep[i] * 5.0 / inv_t + top);  // x near −700 to −746
    std::vector<double> w(n, -1.0);
    const double total = table().exp_weights(w.data(), z.data(), n, top, inv_t);
    long double want_total = 0.0L;
    for (int64_t i = 0; i < n; ++i) {
      const double x = (static_cast<double>(z[i]) - top) * inv_t;
      if (std::isnan(x)) {
        ASSERT_EQ(w[i], 0.0) << "NaN logit at " << i;
        continue;
      }
      const long double exact = expl(static_cast<long double>(x));
      want_total += exact;
      const double bound = exact >= 0x1p-1022L ? 4 * ulp * static_cast<double>(exact) : 0x1p-1074;
      ASSERT_NEAR(w[i], static_cast<double>(exact), bound) << "x = " << x << " at " << i << ", 1/T = " << inv_t;
    }
    EXPECT_EQ(w[0], 1.0);
    EXPECT_EQ(w[1], 0.0);
    EXPECT_NEAR(total, static_cast<double>(want_total), (n + 4) * ulp * static_cast<double>(want_total));
  }
}

// Every set computes decode attention like the plain reference kernel (fp32 cache): the same softmax
// over the same scores, merged from blocks. Head sizes 20, 64 and 128 (the last two compiled for their size).
TEST_P(IsaKernels, DecodeAttentionMatchesTheReference) {
  for (const int64_t D : {20, 64, 128}) {
    const int64_t B = 2, H = 4, Hkv = 2, Tk = 70;
    const auto k = random_vector(B * Tk * Hkv * D, 51, -2, 2), v = random_vector(B * Tk * Hkv * D, 52),
               q = random_vector(B * H * D, 53, -2, 2);
    std::vector<float> kf(k.begin(), k.end()), vf(v.begin(), v.end()), qf(q.begin(), q.end());
    AttentionParams<float> p;
    p.B = B, p.Tq = 1, p.Tk = Tk, p.n_heads = H, p.n_kv_heads = Hkv, p.d_head = D, p.scale = 1.0 / std::sqrt(D);
    p.causal = true, p.q_offset = Tk - 1;
    // No window; a window inside one block of 32 positions; one that starts mid-block and spans blocks.
    for (const int64_t window : {0, 5, 45}) {
      p.window = window;
      std::vector<float> workspace(decode_attention_workspace_size(p, attend::num_threads()));
      std::vector<float> got(B * H * D), want(B * H * D), probs(B * H * Tk);
      table().decode_attention_f32(got.data(), qf.data(), kf.data(), vf.data(), nullptr, nullptr, p, workspace.data());
      attention_reference_forward(want.data(), probs.data(), qf.data(), kf.data(), vf.data(), p);
      testing::expect_all_close(got, want, testing::kFloatTolerance,
                                fmt::format("d_head {}, window {}", D, window));
    }
  }
}

// The quantized gemv: each input block is rounded to int8 at scale amax/127 (error at most half that step per
// value), then the integer products are exact and the block sums are scaled and added in fp32. So against the
// fp64 product of the dequantized weights and the float input, the error is at most Σ_blocks step/2·Σ|w| plus
// fp32's sums bound. A wrong nibble, bit or scale is off by far more.
TEST_P(IsaKernels, GemvQuantWithinTheActivationRoundingBound) {
  const QuantType types[] = {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0,
                             QuantType::Q5_1, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};
  const int64_t C = 768, OC = 600;
  for (QuantType type : types) {
    const int64_t act_block = quant_format(type).block == 256 ? 256 : 32;
    for (int64_t N : {int64_t{1}, kGemvRows, int64_t{7}}) {  // 7: the K types' rows four at a time, then three
      const auto x = random_vector(N * C, 31, -2, 2), w = random_vector(OC * C, 32), b = random_vector(OC, 33);
      std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
      const int64_t row_bytes = quant_row_bytes(type, C);
      std::vector<uint8_t> blocks(OC * row_bytes);
      for (int64_t o = 0; o < OC; ++o) quantize_row(type, blocks.data() + o * row_bytes, wf.data() + o * C, C);
      std::vector<float> wq(OC * C);
      for (int64_t o = 0; o < OC; ++o) dequantize_row(type, wq.data() + o * C, blocks.data() + o * row_bytes, C);
      std::vector<float> out(N * OC);
      table().gemv_quant(type, out.data(), xf.data(), blocks.data(), bf.data(), N, C, OC);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
          double exact = 0, magnitude = 0, rounding = 0;
          for (int64_t k0 = 0; k0 < C; k0 += act_block) {
            double amax = 0, wsum = 0;
            for (int64_t k = k0; k < k0 + act_block; ++k) {
              const double product = double(xf[n * C + k]) * wq[o * C + k];
              exact += product, magnitude += std::fabs(product);
              amax = std::max(amax, std::fabs(double(xf[n * C + k])));
              wsum += std::fabs(double(wq[o * C + k]));
            }
            rounding += amax / 127 / 2 * wsum;
          }
          const double bound = rounding * (1 + 1e-3) + 2 * gamma(C) * (magnitude + rounding) + kUnit * std::fabs(bf[o]);
          ASSERT_NEAR(out[n * OC + o], exact + bf[o], bound)
              << quant_format(type).name << " N=" << N << " row " << n << " channel " << o;
          // Tighter: against the product with the input rounded as the kernel rounds it (amax/127 per block,
          // to nearest), where only fp32's scaling and sums differ. The offset types subtract offset·Σx from
          // sums up to twice the result's terms, hence the factor on the usual bound.
          double rounded = 0, rounded_magnitude = 0;
          for (int64_t k0 = 0; k0 < C; k0 += act_block) {
            float amax = 0;
            for (int64_t k = k0; k < k0 + act_block; ++k) amax = std::max(amax, std::fabs(xf[n * C + k]));
            const float d = amax / 127, id = d != 0 ? 1 / d : 0;
            for (int64_t k = k0; k < k0 + act_block; ++k) {
              const double product = std::nearbyint(xf[n * C + k] * id) * double(d) * wq[o * C + k];
              rounded += product, rounded_magnitude += std::fabs(product);
            }
          }
          ASSERT_NEAR(out[n * OC + o], rounded + bf[o], 4 * gamma(C / 32 + 16) * rounded_magnitude + kUnit * std::fabs(bf[o]))
              << quant_format(type).name << " N=" << N << " row " << n << " channel " << o << " (input rounded as the kernel)";
        }
    }
  }
}

// The input's int8 blocks themselves, exactly (each set quantizes them in its own vector code): against one-hot
// Q8_0 weight rows, channel o's output is the one product 127 · q_o · (d_w · d_x), with q_o = x_o / d_x rounded to
// nearest, ties to even, and d_x = amax / 127 of o's block. Block 0 holds 127 (so d_x = 1) and values on ties.
TEST_P(IsaKernels, ActivationBlocksRoundToNearestEvenExactly) {
  const int64_t C = 96, OC = C;
  std::vector<float> x = [&] {
    const auto r = random_vector(C, 46, -3, 3);
    return std::vector<float>(r.begin(), r.end());
  }();
  const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f, -127.0f, 64.5f, 3.5f, -2.5f};
  std::copy(std::begin(ties), std::end(ties), x.begin());
  x[40] = 0.0f;  // block 1 keeps random values; block 2 is all zeros (d_x = 0)
  std::fill(x.begin() + 64, x.end(), 0.0f);
  const int64_t row_bytes = quant_row_bytes(QuantType::Q8_0, C);
  std::vector<uint8_t> blocks(OC * row_bytes);
  std::vector<float> one_hot(C);
  for (int64_t o = 0; o < OC; ++o) {
    std::fill(one_hot.begin(), one_hot.end(), 0.0f);
    one_hot[o] = 1.0f;
    quantize_row(QuantType::Q8_0, blocks.data() + o * row_bytes, one_hot.data(), C);
  }
  std::vector<float> out(OC);
  table().gemv_quant(QuantType::Q8_0, out.data(), x.data(), blocks.data(), nullptr, 1, C, OC);
  for (int64_t o = 0; o < OC; ++o) {
    const int64_t b = o / 32;
    float amax = 0;
    for (int64_t k = 32 * b; k < 32 * b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    const float q = std::nearbyint(x[o] * id);
    const uint8_t* block = blocks.data() + o * row_bytes + 34 * b;
    const auto dw = static_cast<float>(half_value(static_cast<uint16_t>(block[0] | block[1] << 8)));
    ASSERT_EQ(static_cast<int8_t>(block[2 + o % 32]), 127) << "channel " << o;
    EXPECT_EQ(out[o], 127.0f * q * (dw * d)) << "channel " << o << ": x = " << x[o] << ", d_x = " << d;
  }
  EXPECT_EQ(out[1], 127.0f * 2.0f * static_cast<float>(half_value(static_cast<uint16_t>(blocks[row_bytes] | blocks[row_bytes + 1] << 8))))
      << "2.5 rounds to 2";
}

// A channel's value does not depend on the channels beside it (the kernel takes several rows at a time, and
// which rows go together depends on the threads' shares): every channel of a 37-channel gemv equals, bit for
// bit, the gemv of its row alone. Decoding's results then do not vary with the thread count or the timing.
TEST_P(IsaKernels, GemvQuantChannelsDoNotDependOnTheirNeighbours) {
  const int64_t C = 512, OC = 37;
  for (QuantType type : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                         QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    const auto x = random_vector(kGemvRows * C, 41, -2, 2), w = random_vector(OC * C, 42);
    const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end());
    const int64_t row_bytes = quant_row_bytes(type, C);
    std::vector<uint8_t> blocks(OC * row_bytes);
    for (int64_t o = 0; o < OC; ++o) quantize_row(type, blocks.data() + o * row_bytes, wf.data() + o * C, C);
    std::vector<float> all(kGemvRows * OC), one(kGemvRows);
    table().gemv_quant(type, all.data(), xf.data(), blocks.data(), nullptr, kGemvRows, C, OC);
    for (int64_t o = 0; o < OC; ++o) {
      table().gemv_quant(type, one.data(), xf.data(), blocks.data() + o * row_bytes, nullptr, kGemvRows, C, 1);
      for (int64_t n = 0; n < kGemvRows; ++n)
        ASSERT_EQ(all[n * OC + o], one[n]) << quant_format(type).name << " channel " << o << " row " << n;
    }
  }
}

// Nor does a row's value depend on the input rows beside it (the K types unpack a weight block once for four rows
// of a prompt or a batch): each of 9 rows, a prompt's worth of rows (70: four at a time and a rest) and decoding's
// single row give the same numbers bit for bit, so a request's tokens do not depend on its batch.
TEST_P(IsaKernels, GemvQuantRowsDoNotDependOnTheirNeighbours) {
  const int64_t C = 512, OC = 21, N = 70;
  for (QuantType type : {QuantType::Q8_0, QuantType::Q4_1, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    const auto x = random_vector(N * C, 43, -2, 2), w = random_vector(OC * C, 44), b = random_vector(OC, 45);
    const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
    const int64_t row_bytes = quant_row_bytes(type, C);
    std::vector<uint8_t> blocks(OC * row_bytes);
    for (int64_t o = 0; o < OC; ++o) quantize_row(type, blocks.data() + o * row_bytes, wf.data() + o * C, C);
    std::vector<float> all(N * OC), nine(9 * OC), one(OC);
    table().gemv_quant(type, all.data(), xf.data(), blocks.data(), bf.data(), N, C, OC);
    table().gemv_quant(type, nine.data(), xf.data() + 3 * C, blocks.data(), bf.data(), 9, C, OC);
    for (int64_t n = 0; n < N; ++n) {
      table().gemv_quant(type, one.data(), xf.data() + n * C, blocks.data(), bf.data(), 1, C, OC);
      for (int64_t o = 0; o < OC; ++o) {
        ASSERT_EQ(all[n * OC + o], one[o]) << quant_format(type).name << " row " << n << " of " << N << ", channel " << o;
        if (n >= 3 && n < 12) {
          ASSERT_EQ(nine[(n - 3) * OC + o], one[o]) << quant_format(type).name << " row " << n - 3 << " of 9, channel " << o;
        }
      }
    }
  }
}

// Software prefetch (kernels/cpu.h's gemv_prefetch: decoding's one to three rows on Intel's cores) changes no
// bit of the quantized kernels: every type's plain kernel and the repacked Q4_0 and Q8_0 ones, with it and without.
TEST_P(IsaKernels, QuantizedGemvIsTheSameWithAndWithoutPrefetch) {
  const int64_t C = 768, OC = 67;
  const auto x = random_vector(3 * C, 61, -2, 2), w = random_vector(OC * C, 62), b = random_vector(OC, 63);
  const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
  const bool chosen = gemv_prefetch();
  for (QuantType type : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                         QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    const int64_t row_bytes = quant_row_bytes(type, C);
    std::vector<uint8_t> blocks(OC * row_bytes);
    for (int64_t o = 0; o < OC; ++o) quantize_row(type, blocks.data() + o * row_bytes, wf.data() + o * C, C);
    std::vector<uint8_t> repacked;
    if (type == QuantType::Q4_0) repacked.resize(q4_0x8_bytes(OC, C)), repack_q4_0x8(repacked.data(), blocks.data(), OC, C);
    if (type == QuantType::Q8_0) repacked.resize(q8_0x8_bytes(OC, C)), repack_q8_0x8(repacked.data(), blocks.data(), OC, C);
    for (int64_t N = 1; N <= 3; ++N) {
      std::vector<float> on(N * OC), off(N * OC);
      auto run = [&](bool prefetch, std::vector<float>& out, bool packed) {
        set_gemv_prefetch(prefetch);
        if (packed)
          (type == QuantType::Q4_0 ? table().gemv_q4_0x8 : table().gemv_q8_0x8)(out.data(), xf.data(), repacked.data(),
                                                                                bf.data(), N, C, OC);
        else
          table().gemv_quant(type, out.data(), xf.data(), blocks.data(), bf.data(), N, C, OC);
      };
      for (bool packed : {false, true}) {
        if (packed && repacked.empty()) continue;
        run(false, off, packed);
        run(true, on, packed);
        set_gemv_prefetch(chosen);
        for (int64_t i = 0; i < N * OC; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(on[i]), std::bit_cast<uint32_t>(off[i]))
              << quant_format(type).name << (packed ? " repacked" : "") << " N=" << N << " output " << i;
      }
    }
  }
}

// Q4_0 and Q8_0 rows repacked eight at a time: the repacked kernel gives every channel of its groups what the
// plain kernel gives, up to the order of the fp32 sums (the integer sums are exact in both), for one row, for
// decoding's few (each thread quantizing them itself) and for a prompt's many (quantized beforehand, in parallel);
// a row's outputs are the same bit for bit whatever rows come with it (a server's batched step); the rows past the
// last group are matmul_forward_x8's plain tail.
TEST_P(IsaKernels, GemvRepackedEqualsThePlainKernel) {
  const int64_t C = 512, OC = 37;
  for (QuantType type : {QuantType::Q4_0, QuantType::Q8_0}) {
    const auto x = random_vector(20 * C, 51, -2, 2), w = random_vector(OC * C, 52), b = random_vector(OC, 53);
    const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
    const int64_t row_bytes = quant_row_bytes(type, C);
    const bool q4 = type == QuantType::Q4_0;
    std::vector<uint8_t> blocks(OC * row_bytes), repacked(q4 ? q4_0x8_bytes(OC, C) : q8_0x8_bytes(OC, C));
    for (int64_t o = 0; o < OC; ++o) quantize_row(type, blocks.data() + o * row_bytes, wf.data() + o * C, C);
    if (q4) repack_q4_0x8(repacked.data(), blocks.data(), OC, C);
    else repack_q8_0x8(repacked.data(), blocks.data(), OC, C);
    std::vector<float> alone(OC);
    for (int64_t N : {int64_t{1}, kGemvRows, int64_t{7}, int64_t{20}}) {
      std::vector<float> plain(N * OC), packed(N * OC);
      table().gemv_quant(type, plain.data(), xf.data(), blocks.data(), bf.data(), N, C, OC);
      (q4 ? table().gemv_q4_0x8 : table().gemv_q8_0x8)(packed.data(), xf.data(), repacked.data(), bf.data(), N, C, OC);
      if (N == 1) std::copy_n(packed.begin(), OC, alone.begin());
      std::vector<float> wq(C);
      for (int64_t o = 0; o < OC / 8 * 8; ++o) {
        ASSERT_EQ(packed[o], alone[o]) << quant_format(type).name << " N=" << N << " channel " << o << ": row 0 moved";
        dequantize_row(type, wq.data(), blocks.data() + o * row_bytes, C);
        for (int64_t n = 0; n < N; ++n) {
          double magnitude = std::fabs(bf[o]);
          for (int64_t k = 0; k < C; ++k) magnitude += std::fabs(double(wq[k]) * xf[n * C + k]);
          ASSERT_NEAR(packed[n * OC + o], plain[n * OC + o], 4 * gamma(C / 32 + 16) * magnitude)
              << quant_format(type).name << " N=" << N << " channel " << o;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EverySet, IsaKernels, ::testing::Values(Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace attend::kernels

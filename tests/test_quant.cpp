// ggml's block formats (kernels/quant.h): hand-worked blocks pin every layout (scales, minimums, nibble and
// bit order), and quantization is checked against the error it can guarantee and against the plain rule.
#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"
#include "testing.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace attend::kernels {
namespace {

// Gaussian values, as trained weights roughly are (the error figures below assume them).
std::vector<float> gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(gen);
  return x;
}

constexpr QuantType kAll[] = {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                              QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_K};

std::vector<float> dequantized(QuantType type, const std::vector<uint8_t>& blocks) {
  const QuantFormat& f = quant_format(type);
  std::vector<float> out(blocks.size() / f.bytes * f.block);
  dequantize_row(type, out.data(), blocks.data(), static_cast<int64_t>(out.size()));
  return out;
}
std::vector<uint8_t> quantized(QuantType type, const std::vector<float>& x, const float* importance = nullptr) {
  std::vector<uint8_t> b(quant_row_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row(type, b.data(), x.data(), static_cast<int64_t>(x.size()), importance);
  return b;
}

TEST(Quant, FormatsAreGgmls) {
  // Block sizes and bytes as ggml-common.h's static_asserts state them.
  const std::pair<QuantType, std::pair<int, int>> want[] = {
      {QuantType::Q8_0, {32, 34}},   {QuantType::Q4_0, {32, 18}},   {QuantType::Q4_1, {32, 20}},
      {QuantType::Q5_0, {32, 22}},   {QuantType::Q5_1, {32, 24}},   {QuantType::Q4_K, {256, 144}},
      {QuantType::Q5_K, {256, 176}}, {QuantType::Q6_K, {256, 210}}, {QuantType::Q8_K, {256, 292}}};
  for (const auto& [type, size] : want) {
    EXPECT_EQ(quant_format(type).block, size.first) << quant_format(type).name;
    EXPECT_EQ(quant_format(type).bytes, size.second) << quant_format(type).name;
  }
  EXPECT_EQ(quant_row_bytes(QuantType::Q4_K, 768), 3 * 144);
}

// fp16 0.5 = 0x3800, 0.25 = 0x3400, 2 = 0x4000, -1 = 0xBC00.
TEST(Quant, HandWorkedQ8_0) {
  std::vector<uint8_t> b(34, 0);
  b[0] = 0x00, b[1] = 0x38;  // d = 0.5
  b[2] = 3, b[3] = 0xFF, b[33] = 0x81;  // q0 = 3, q1 = −1, q31 = −127
  const auto y = dequantized(QuantType::Q8_0, b);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[31], -63.5f);
}

TEST(Quant, HandWorkedQ4_0AndQ4_1NibbleOrder) {
  std::vector<uint8_t> b(18, 0x88);  // every nibble 8: zero
  b[0] = 0x00, b[1] = 0x38;         // d = 0.5
  b[2] = 0x9A;                      // value 0 = (10 − 8)·0.5 = 1, value 16 = (9 − 8)·0.5 = 0.5
  b[17] = 0x0F;                     // value 15 = (15 − 8)·0.5 = 3.5, value 31 = (0 − 8)·0.5 = −4
  auto y = dequantized(QuantType::Q4_0, b);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[31], -4.0f);
  EXPECT_EQ(y[1], 0.0f);

  std::vector<uint8_t> c(20, 0);
  c[0] = 0x00, c[1] = 0x38;  // d = 0.5
  c[2] = 0x00, c[3] = 0xBC;  // m = −1
  c[4] = 0x31;               // value 0 = 1·0.5 − 1, value 16 = 3·0.5 − 1
  y = dequantized(QuantType::Q4_1, c);
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], -1.0f);
}

TEST(Quant, HandWorkedQ5_0AndQ5_1FifthBits) {
  std::vector<uint8_t> b(22, 0);
  b[0] = 0x00, b[1] = 0x40;  // d = 2
  // qh (little-endian): bit 0 (value 0), bit 16 (value 16), bit 31 (value 31).
  b[2] = 0x01, b[4] = 0x01, b[5] = 0x80;
  b[6] = 0x21;  // value 0: low 1, fifth bit 1 → 17 − 16 = 1; value 16: low 2, fifth bit 1 → 18 − 16 = 2
  auto y = dequantized(QuantType::Q5_0, b);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[16], 4.0f);
  EXPECT_EQ(y[1], -32.0f);  // 0 − 16
  EXPECT_EQ(y[31], 0.0f);   // 16 − 16
  EXPECT_EQ(y[15], -32.0f);

  std::vector<uint8_t> c(24, 0);
  c[0] = 0x00, c[1] = 0x34;  // d = 0.25
  c[2] = 0x00, c[3] = 0x40;  // m = 2
  c[4] = 0x02;               // qh bit 1: value 1 has its fifth bit
  c[8 + 1] = 0x0F;           // value 1: 15 + 16 = 31 → 31·0.25 + 2; value 17: 0 → 2
  y = dequantized(QuantType::Q5_1, c);
  EXPECT_EQ(y[1], 9.75f);
  EXPECT_EQ(y[17], 2.0f);
}

TEST(Quant, HandWorkedQ4_KScalesMinsAndSubBlockOrder) {
  std::vector<uint8_t> b(144, 0);
  b[0] = 0x00, b[1] = 0x38;  // d = 0.5
  b[2] = 0x00, b[3] = 0x34;  // dmin = 0.25
  uint8_t* s = b.data() + 4;
  // Sub-block 0: scale 3, min 4 (low six bits of s[0], s[4]). Sub-block 5: scale 0x25 = 37, min 0x1A = 26:
  // low nibbles in s[9], top two bits in s[1] >> 6 (scale) and s[5] >> 6 (min).
  s[0] = 3, s[4] = 4;
  s[9] = 0xA5;              // scale low 5, min low 10
  s[1] = 0x80, s[5] = 0x40;  // scale high 2 (→ 0x25), min high 1 (→ 0x1A)
  // Sub-block 0 is the low nibbles of bytes 0-31; sub-block 5 the high nibbles of bytes 64-95.
  uint8_t* q = b.data() + 16;
  q[0] = 0x07;   // value 0: 3·0.5·7 − 0.25·4 = 9.5
  q[70] = 0xB0;  // value 128 + 32 + 6 = 166: 37·0.5·11 − 26·0.25 = 197
  const auto y = dequantized(QuantType::Q4_K, b);
  EXPECT_EQ(y[0], 9.5f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[166], 197.0f);
  EXPECT_EQ(y[167], -6.5f);
  EXPECT_EQ(y[32], 0.0f);  // sub-block 1: scale 0, min 0
}

TEST(Quant, HandWorkedQ5_KFifthBits) {
  std::vector<uint8_t> b(176, 0);
  b[0] = 0x00, b[1] = 0x3C;  // d = 1
  uint8_t* s = b.data() + 4;
  s[2] = 1, s[3] = 2;  // sub-block 2: scale 1; sub-block 3: scale 2 (mins 0)
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  // Value 64 + 5 (sub-block 2, pair i = 1, low): fifth bit is bit 2 of qh[5]; value 96 + 5 (sub-block 3): bit 3.
  qh[5] = 0x04 | 0x08;
  qs[32 + 5] = 0x31;  // low nibble 1 → 17·1; high 3 → 19·2
  const auto y = dequantized(QuantType::Q5_K, b);
  EXPECT_EQ(y[69], 17.0f);
  EXPECT_EQ(y[101], 38.0f);
  EXPECT_EQ(y[70], 0.0f);
}

TEST(Quant, HandWorkedQ6_KHalvesAndTopBits) {
  std::vector<uint8_t> b(210, 0);
  auto* sc = reinterpret_cast<int8_t*>(b.data() + 192);
  for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(j + 1);
  sc[11] = -3;
  b[208] = 0x00, b[209] = 0x38;  // d = 0.5
  // Every q = 32 (zero): low nibbles 0, top bits 2 (0b10 in each pair).
  for (int l = 0; l < 64; ++l) b[128 + l] = 0xAA;
  // Half 1, l = 2: value 128 + 2 + 96 = 226 (sub-block 14) is the high nibble of ql[64 + 32 + 2] with qh[32 + 2]'s
  // bits 6-7; value 128 + 2 + 64 = 194 (sub-block 12) the high nibble of ql[64 + 2] with bits 4-5.
  b[64 + 32 + 2] = 0x50;                        // value 226: low nibble 5
  b[128 + 32 + 2] = 0x3A;                       // 226's top bits 0 → q = 5 − 32; 194's top bits 3 → q = 48 + ql's 0 − 32 = 16
  b[64 + 2] = 0x00;
  // Half 1, l = 20 + 32 = 52 (sub-block 11, scale −3): value 128 + 52 is the low nibble of ql[64 + 32 + 20].
  b[64 + 32 + 20] = 0x07;                       // q = 32 + 7 − 32 = 7 with its top bits 2 (0xAA)
  const auto y = dequantized(QuantType::Q6_K, b);
  EXPECT_EQ(y[226], 0.5f * 15 * (5 - 32));
  EXPECT_EQ(y[194], 0.5f * 13 * 16);
  EXPECT_EQ(y[128 + 52], 0.5f * -3 * 7);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(Quant, HandWorkedQ8_K) {
  std::vector<uint8_t> b(292, 0);
  const float d = 0.125f;
  std::memcpy(b.data(), &d, 4);
  b[4 + 7] = 0xF8;  // −8
  const auto y = dequantized(QuantType::Q8_K, b);
  EXPECT_EQ(y[7], -1.0f);
  EXPECT_EQ(y[8], 0.0f);
}

TEST(Quant, Q8_0ErrorWithinHalfAStep) {
  // q = round(x/d), d = max|x|/127 stored as fp16: |x − q·d₁₆| ≤ d/2 + 127·|d − d₁₆| ≤ d·(1/2 + 127·2⁻¹¹).
  const auto x = gaussian(32 * 64, 11, 3.0f);
  const auto y = dequantized(QuantType::Q8_0, quantized(QuantType::Q8_0, x));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const double d = amax / 127.0;
    for (int i = 0; i < 32; ++i)
      ASSERT_LE(std::fabs(x[32 * b + i] - y[32 * b + i]), d * (0.5 + 127 * 0x1p-11) * (1 + 1e-6)) << b << "," << i;
  }
}

TEST(Quant, Q8_KMatchesItsSums) {
  const auto x = gaussian(512, 12, 2.0f);
  const auto b = quantized(QuantType::Q8_K, x);
  for (int blk = 0; blk < 2; ++blk) {
    const uint8_t* p = b.data() + 292 * blk;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += static_cast<int8_t>(p[4 + 16 * g + i]);
      int16_t stored;
      std::memcpy(&stored, p + 260 + 2 * g, 2);
      EXPECT_EQ(stored, sum);
    }
  }
  const auto y = dequantized(QuantType::Q8_K, b);
  for (int blk = 0; blk < 2; ++blk) {
    float amax = 0;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * blk + i]));
    for (int i = 0; i < 256; ++i) ASSERT_NEAR(y[256 * blk + i], x[256 * blk + i], amax / 127 / 2 * 1.0001);  // half a step
  }
}

// The plain rule (ggml's reference quantizers without activation statistics): the extreme value on the extreme
// level, every other value rounded. The search must never be worse in squared error, block by block (for Q4_0 and
// Q5_0 the plain rule is one of its candidates).
double plain_rule_error_32(QuantType type, const float* x) {
  double err = 0;
  const bool offset = type == QuantType::Q4_1 || type == QuantType::Q5_1;
  const int levels = type == QuantType::Q4_0 || type == QuantType::Q4_1 ? 16 : 32;
  auto half = [](float v) {
    uint16_t h;
    float_to_half(&h, &v, 1);
    float f;
    half_to_float(&f, &h, 1);
    return f;
  };
  if (offset) {
    float lo = x[0], hi = x[0];
    for (int i = 0; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    const float d = (hi - lo) / (levels - 1), id = d ? 1 / d : 0;
    for (int i = 0; i < 32; ++i) {
      const int q = std::min(levels - 1, static_cast<int>((x[i] - lo) * id + 0.5f));
      err += std::pow(x[i] - (q * half(d) + half(lo)), 2);
    }
  } else {
    float max = 0, amax = 0;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const float d = max / -(levels / 2), id = d ? 1 / d : 0;
    for (int i = 0; i < 32; ++i) {
      const int q = std::min(levels - 1, static_cast<int>(x[i] * id + levels / 2 + 0.5f));
      err += std::pow(x[i] - (q - levels / 2) * half(d), 2);
    }
  }
  return err;
}

TEST(Quant, SearchIsNeverWorseThanThePlainRule) {
  const auto x = gaussian(32 * 512, 13, 1.0f);
  for (QuantType type : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1}) {
    const auto y = dequantized(type, quantized(type, x));
    double total = 0, plain_total = 0;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      double err = 0;
      for (int i = 0; i < 32; ++i) err += std::pow(x[32 * b + i] - y[32 * b + i], 2);
      const double plain = plain_rule_error_32(type, x.data() + 32 * b);
      // The search's least-squares scale is then rounded to fp16 (as the plain rule's is): allow that rounding.
      ASSERT_LE(err, plain * 1.01 + 1e-12) << quant_format(type).name << " block " << b;
      total += err, plain_total += plain;
    }
    // Q4_0 and Q5_0 search only scales that keep each block's extreme exact (quant.cpp says why): less to gain.
    const bool symmetric = type == QuantType::Q4_0 || type == QuantType::Q5_0;
    EXPECT_LT(total, (symmetric ? 0.99 : 0.95) * plain_total) << quant_format(type).name << ": the search should gain on average";
  }
}

// Relative RMS error of each type on Gaussian values. Rounding to a grid of step Δ leaves Δ/√12 RMS; a block's
// step is its range over its levels (32 Gaussians span about ±2.1σ, 256 about ±2.9σ; a K type's sub-block scale is
// itself rounded to 6 or 8 bits). The bounds are that model's figure with a third of margin, far below what a
// wrong layout or a lost bit gives (Q4_0: model 2.1/8/√12 = 0.076, bound 0.10; measured 0.081 on this data).
TEST(Quant, RoundTripErrorFitsEachFormatsBits) {
  const auto x = gaussian(256 * 64, 14, 1.0f);
  double power = 0;
  for (float v : x) power += static_cast<double>(v) * v;
  const std::pair<QuantType, double> bound[] = {{QuantType::Q8_0, 0.007}, {QuantType::Q4_0, 0.10}, {QuantType::Q4_1, 0.09},
                                                {QuantType::Q5_0, 0.05},  {QuantType::Q5_1, 0.045}, {QuantType::Q4_K, 0.09},
                                                {QuantType::Q5_K, 0.045}, {QuantType::Q6_K, 0.023}, {QuantType::Q8_K, 0.009}};
  for (const auto& [type, limit] : bound) {
    const auto y = dequantized(type, quantized(type, x));
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) err += std::pow(x[i] - y[i], 2);
    const double rel = std::sqrt(err / power);
    EXPECT_LT(rel, limit) << quant_format(type).name;
    EXPECT_GT(rel, limit / 20) << quant_format(type).name << ": suspiciously exact";
  }
}

TEST(Quant, ExactlyRepresentableBlocksComeBackExactly) {
  // Values that are d·q for an fp16 d and integer levels spanning the whole range: the search's first candidate
  // reproduces them, and nothing beats zero error.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * static_cast<float>((i * 7) % 16 - 8);
  x[3] = -2.0f;  // −8·0.25: the extreme on the extra level
  EXPECT_EQ(dequantized(QuantType::Q4_0, quantized(QuantType::Q4_0, x)), x);
  for (int i = 0; i < 32; ++i) x[i] = 0.5f * static_cast<float>((i * 5) % 32 - 16);
  x[0] = -8.0f;
  EXPECT_EQ(dequantized(QuantType::Q5_0, quantized(QuantType::Q5_0, x)), x);
}

TEST(Quant, ZeroAndConstantBlocks) {
  for (QuantType type : kAll) {
    const int64_t n = quant_format(type).block * 2;
    std::vector<float> zero(n, 0.0f);
    EXPECT_EQ(dequantized(type, quantized(type, zero)), zero) << quant_format(type).name;
    std::vector<float> constant(n, 0.75f);
    const auto y = dequantized(type, quantized(type, constant));
    for (float v : y) ASSERT_NEAR(v, 0.75f, 0.75f * 0.01) << quant_format(type).name;
  }
}

TEST(Quant, ImportanceLowersTheWeightedError) {
  // Columns with large importance are fitted more closely than without it.
  const int64_t n = 256 * 32;
  const auto x = gaussian(n, 15, 1.0f);
  std::vector<float> importance(n);
  for (int64_t i = 0; i < n; ++i) importance[i] = (i % 7 == 0) ? 50.0f : 0.1f;
  for (QuantType type : {QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    const auto plain = dequantized(type, quantized(type, x));
    const auto weighted = dequantized(type, quantized(type, x, importance.data()));
    double e_plain = 0, e_weighted = 0;
    for (int64_t i = 0; i < n; ++i) {
      e_plain += importance[i] * std::pow(x[i] - plain[i], 2);
      e_weighted += importance[i] * std::pow(x[i] - weighted[i], 2);
    }
    EXPECT_LT(e_weighted, 0.9 * e_plain) << quant_format(type).name;
  }
}

TEST(Quant, DotReferenceIsTheDequantizedDot) {
  const auto w = gaussian(512, 16, 1.0f), x = gaussian(512, 17, 1.0f);
  for (QuantType type : kAll) {
    const auto b = quantized(type, w);
    const auto y = dequantized(type, b);
    double want = 0;
    for (size_t i = 0; i < y.size(); ++i) want += static_cast<double>(y[i]) * x[i];
    EXPECT_DOUBLE_EQ(quant_dot_reference(type, b.data(), x.data(), 512), want) << quant_format(type).name;
  }
}

// A block's fp16 scale is read exactly: a Q8_0 block of q = (1, −1, 0, ...) under every one of the 65,536 scale
// bit patterns (normals, subnormals, zeros, infinities, NaN) gives the array conversion's value, and its negation.
TEST(Quant, EveryFp16ScaleReadsExactly) {
  uint8_t block[34] = {};
  block[2] = 1, block[3] = 0xff;  // q0 = 1, q1 = −1
  float y[32];
  for (uint32_t h = 0; h < 65536; ++h) {
    block[0] = static_cast<uint8_t>(h), block[1] = static_cast<uint8_t>(h >> 8);
    dequantize_row(QuantType::Q8_0, y, block, 32);
    const auto bits = static_cast<uint16_t>(h);
    float want;
    half_to_float(&want, &bits, 1);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(y[0]) && std::isnan(y[1])) << std::hex << h;
      continue;
    }
    ASSERT_EQ(std::memcmp(&y[0], &want, 4), 0) << std::hex << h << ": " << y[0] << " vs " << want;
    ASSERT_EQ(y[1], -want) << std::hex << h;
  }
}

// The K blocks' twelve scale bytes unpacked four at a time (the dot products' way) give every sub-block the scale
// and minimum the one-at-a-time reading gives, for every bit of every byte.
TEST(Quant, KScalesUnpackedTogetherEqualOneAtATime) {
  std::mt19937 gen(5);
  for (int trial = 0; trial < 2000; ++trial) {
    uint8_t s[12];
    for (uint8_t& b : s) b = static_cast<uint8_t>(gen());
    if (trial < 12) std::memset(s, 0, 12), s[trial] = 0xff;  // each byte alone
    uint8_t scales[8], mins[8];
    quant_layout::scales_mins_k4(s, scales, mins);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      quant_layout::scale_min_k4(s, j, &sc, &m);
      ASSERT_EQ(scales[j], sc) << "trial " << trial << " sub-block " << j;
      ASSERT_EQ(mins[j], m) << "trial " << trial << " sub-block " << j;
    }
  }
}

}  // namespace
}  // namespace attend::kernels

// Decoding's matmul with block-quantized weights (kernels/quant.h): each input row is quantized to int8 blocks
// once (one scale per 32 values for the 32-value types, per 256 with sums per 16 for the K types, as llama.cpp
// does), and every weight block's integer dot product with it is scaled by both blocks' scales. The weights
// stream through once; their small integers are multiplied as bytes (AVX2's vpmaddubsw: unsigned weight levels
// times signed activations into 16-bit pairs, vpmaddwd into 32-bit sums; the avx512vnni set's vpdpbusd does both
// in one for the 32-value types, whose blocks have one scale), and a type whose levels are offset
// (Q4_0's q − 8, Q6_K's q − 32, the K types' minimums) subtracts offset · Σx per block from the activation sums.
#include "kernels/cpu.h"
#include "kernels/isa/isa.h"
#include "kernels/isa/channels.h"
#include "kernels/isa/lanes.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kernels/quant_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

// GCC 12 takes the undefined upper lanes inside the AVX-512 intrinsics (the casts and zero-extensions to 512 bits,
// the reductions) for uninitialized values (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#if !defined(__clang__) && __GNUC__ < 13  // clang has no such warnings, and warns about the unknown names
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attend::kernels::ATTEND_ISA {
namespace {

float half_value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lanes::widen_f16(h);
}

// An input row's 32 values as int8 with their scale, and their sum times the scale (the 32-value types'
// activations).
struct Act32 {
  float d;
  float dsum;      // d · Σq
  int32_t sum;     // Σq
  int32_t sum128;  // −128 · Σq: the offset of the repacked Q8_0 rows' unsigned bytes (Q8X8)
  int8_t q[32];
};
// 256 values with their sums per 16 (the K types' activations).
struct Act256 {
  float d;
  int16_t sums[16];
  int8_t q[256];
};

// The largest |x| of n values (a multiple of 16): exact in any order. (For finite values: the sets treat a NaN
// differently, and a row with one has no meaningful product anyway.)
float amax_of(const float* x, int n) {
#if defined(__AVX512F__)
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  return _mm512_reduce_max_ps(m);
#elif defined(__AVX2__)
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
#else
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
#endif
}

// q[i] = x[i]·id rounded to the nearest integer, ties to even (nearbyint's rounding in the default mode, which the
// vector conversions use), for 16 values with |x·id| ≤ 127; returns Σq. The same numbers on every set for finite x.
int32_t round16(const float* x, float id, int8_t* q) {
#if defined(__AVX512F__)
  const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(id)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(v));
  return _mm512_reduce_add_epi32(v);
#elif defined(__AVX2__)
  const __m256 scale = _mm256_set1_ps(id);
  const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), scale));
  const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), scale));
  // The packs work within 128-bit lanes: int16 a0-3 b0-3 | a4-7 b4-7, then bytes a0-3 b0-3 a4-7 b4-7, whose
  // four-byte groups go back in order.
  const __m256i words = _mm256_packs_epi32(a, b);
  const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm_shuffle_epi32(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
  const __m256i t = _mm256_add_epi32(a, b);
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, _MM_SHUFFLE(1, 0, 3, 2)));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(sum);
#else
  int32_t sum = 0;
  for (int i = 0; i < 16; ++i) {
    q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
    sum += q[i];
  }
  return sum;
#endif
}

// An input row's blocks: the scale d = amax / 127 (the largest value maps to ±127), each value rounded to
// nearest at 1/d. Every decoding step runs this on each matmul's input rows (a batch's eight rows: 8 × 65k values
// a GPT-2 step), so it is vector code too.
void quantize_act32(Act32* out, const float* x, int64_t C) {
  for (int64_t b = 0; b < C / 32; ++b, x += 32) {
    const float amax = amax_of(x, 32);
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    const int32_t sum = round16(x, id, out[b].q) + round16(x + 16, id, out[b].q + 16);
    out[b].d = d, out[b].dsum = d * static_cast<float>(sum), out[b].sum = sum, out[b].sum128 = -128 * sum;
  }
}

void quantize_act256(Act256* out, const float* x, int64_t C) {
  for (int64_t b = 0; b < C / 256; ++b, x += 256) {
    const float amax = amax_of(x, 256);
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    for (int g = 0; g < 16; ++g) out[b].sums[g] = static_cast<int16_t>(round16(x + 16 * g, id, out[b].q + 16 * g));
    out[b].d = d;
  }
}

// ---- 32 products of unsigned levels (< 128) and signed activations -----------------------------------

#if defined(__AVX2__)
using Acc = __m256;
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// 16-bit pair sums of u·x (u < 128, so no pair saturates: 2·127·127 < 2¹⁵).
[[maybe_unused]] inline __m256i pairs(__m256i u, __m256i x) { return _mm256_maddubs_epi16(u, x); }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// init + the sums of four products u·x in each 32-bit lane: VNNI's vpdpbusd, one instruction for vpmaddubsw +
// vpmaddwd (+ vpaddd).
inline __m256i sum32_onto(__m256i init, __m256i u, __m256i x) { return _mm256_dpbusd_epi32(init, u, x); }
inline __m256i sum32(__m256i u, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x); }
#else
inline __m256i sum32(__m256i u, __m256i x) { return _mm256_madd_epi16(pairs(u, x), _mm256_set1_epi16(1)); }
inline __m256i sum32_onto(__m256i init, __m256i u, __m256i x) { return _mm256_add_epi32(init, sum32(u, x)); }
#endif
inline __m256 accumulate(__m256 acc, __m256i sums, float scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(scale), acc);
}
inline float total(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// The 32 nibbles of 16 bytes in the 32-value types' order: low nibbles (values 0-15), then high (16-31).
inline __m256i nibbles16(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), mask), _mm_and_si128(b, mask));
}
// Σ_j c_j·Σx_j over the sixteen activation sums of a 256-value block, in 32-bit lanes: c as sixteen int16
// (vpmaddwd). The K types' offsets: Q4_K/Q5_K's minimums (mins_per_sum), Q6_K's scales times 32.
inline __m256i weighted_sums(__m256i c16, const Act256& x) { return _mm256_madd_epi16(c16, load32(x.sums)); }
// Q4_K/Q5_K's eight minimums, each twice: sub-block j of 32 is activation sums 2j and 2j + 1.
inline __m256i mins_per_sum(const uint8_t* m) {
  return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)),
                                               _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
}
// Q6_K's start for a block's integer sum: −32·Σ_j sc_j·Σx_j, the levels' offset of 32, from the sums at once.
inline __m256i q6_offset(__m256i sc16, const Act256& x) {
  return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(weighted_sums(sc16, x), 5));
}
#else
using Acc = float;
inline float total(float acc) { return acc; }
#endif

// The 32-value types' dots run over the blocks two at a time, each into its own accumulators: one block's work is
// a few instructions, and a single chain of fused multiply-adds (4 cycles each) would bound the loop. (The K
// types' blocks are long enough: the same split made them slower.)
template <typename OneBlock>
float over_blocks(int64_t blocks, OneBlock one) {
  Acc acc[2] = {};
  float correction[2] = {};
  int64_t b = 0;
  for (; b + 1 < blocks; b += 2) {
    one(b, acc[0], correction[0]);
    one(b + 1, acc[1], correction[1]);
  }
  if (b < blocks) one(b, acc[0], correction[0]);
#if defined(__AVX2__)
  return total(_mm256_add_ps(acc[0], acc[1])) + correction[0] + correction[1];
#else
  return acc[0] + acc[1] + correction[0] + correction[1];
#endif
}

// Σ over the row's blocks of w·x, each block's integer sum scaled by the weight's and the activation's scales.
float dot_q8_0(const uint8_t* w, const Act32* a, int64_t blocks) {
  return over_blocks(blocks, [&](int64_t b, Acc& acc, float&) {
    const uint8_t* block = w + 34 * b;
    const float scale = half_value(block) * a[b].d;
#if defined(__AVX2__)
    const __m256i q = load32(block + 2), x = load32(a[b].q);
    // Signed × signed through unsigned × signed: |q| times x with q's sign.
    acc = accumulate(acc, sum32(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), scale);
#else
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += static_cast<int8_t>(block[2 + i]) * a[b].q[i];
    acc += static_cast<float>(s) * scale;
#endif
  });
}

// The 32 unsigned levels of a Q4_0/Q4_1/Q5_0/Q5_1 block: the nibbles, with Q5's fifth bits joined.
template <int kBits, bool kMin>
void levels(uint8_t* u, const uint8_t* block) {
  const uint8_t* qs = block + (kMin ? 4 : 2) + (kBits == 5 ? 4 : 0);
  uint32_t qh = 0;
  if constexpr (kBits == 5) qh = qs[-4] | qs[-3] << 8 | qs[-2] << 16 | static_cast<uint32_t>(qs[-1]) << 24;
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>((qs[j] & 15) | ((qh >> j) & 1) << 4);
    u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
  }
}

// Q4_0/Q5_0 (levels offset by 8 or 16) and Q4_1/Q5_1 (a minimum m: Σ (d·q + m)·x = d·Σq·x + m·Σx).
template <int kBits, bool kMin>
float dot_32(const uint8_t* w, const Act32* a, int64_t blocks) {
  constexpr int64_t kBytes = (kMin ? 4 : 2) + (kBits == 5 ? 4 : 0) + 16;
  constexpr float kOffset = 1 << (kBits - 1);
  return over_blocks(blocks, [&](int64_t b, Acc& acc, float& correction) {
    const uint8_t* block = w + kBytes * b;
    const float d = half_value(block), dx = a[b].d;
    if constexpr (kMin)
      correction += half_value(block + 2) * a[b].dsum;
    else
      correction -= kOffset * d * a[b].dsum;
    alignas(32) uint8_t u[32];
#if defined(__AVX2__)
    __m256i q;
    if constexpr (kBits == 4) {
      q = nibbles16(block + kBytes - 16);
    } else {
      levels<kBits, kMin>(u, block);
      q = load32(u);
    }
    acc = accumulate(acc, sum32(q, load32(a[b].q)), d * dx);
#else
    levels<kBits, kMin>(u, block);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += u[j] * a[b].q[j];
    acc += static_cast<float>(s) * d * dx;
#endif
  });
}

// The K types' dots take R input rows at a time (R ≤ 4): each weight block is unpacked once (nibbles, fifth bits,
// scales) and multiplied with every row's activations, so that a prompt's rows or a batch's do not unpack it once
// each. Each row has its own sums and accumulators, and its operations are the same whatever R: a row's result
// does not depend on the rows beside it (decoding alone or in a batch gives the same numbers).
constexpr int kRowsAtOnce = 4;
constexpr int64_t kTileBytes = 16 << 10;  // a prompt's tile of weight rows (gemv_quant)

#if defined(__AVX512BW__)
// The K types in 512 bits: 64 levels a vector, their pair products with the activations (vpmaddubsw, 32 int16
// lanes) multiplied by each lane's sub-block scale and summed into 32-bit lanes (vpmaddwd, vpaddd). A sub-block's
// scale sits in the lanes of its pairs: permuted from the block's scales, once per block for all R rows.
// (AVX512-VNNI's vpdpwssd would do vpmaddwd + vpaddd in one, but it puts each product's five-cycle latency on the
// row's chain of sums, where vpaddd puts one; it measured no faster. On Intel's cores the 512-bit integer work
// issues on two ports where 256-bit issues on three, so in cache these dots run level with the AVX2 ones; from
// memory, decoding Q4_K_M, they were faster: docs/BENCHMARKS.md.)
inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i scaled_onto(__m512i sum, __m512i pairs, __m512i scales) {
  return _mm512_add_epi32(sum, _mm512_madd_epi16(pairs, scales));
}
// The permutations that put a block's int16 scale first + i / span in lane i = 0..31 of vector k (span: the pair
// sums per sub-block, 16 for sub-blocks of 32 levels, 8 for 16; first = 32k / span). Tables, not loops: a row of
// GPT-2's is three blocks, and what a dot sets up it sets up per row.
template <int kSpan>
struct ScaleLanes {
  alignas(64) int16_t index[4][32];
  constexpr ScaleLanes() : index{} {
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 32; ++i) index[k][i] = static_cast<int16_t>((32 * k + i) / kSpan);
  }
  __m512i operator[](int k) const { return _mm512_load_si512(index[k]); }
};
constexpr ScaleLanes<16> kScalesOf32;  // Q4_K, Q5_K: vector i holds sub-blocks 2i, 2i + 1
constexpr ScaleLanes<8> kScalesOf16;   // Q6_K: vector k holds sub-blocks 4k .. 4k + 3
#endif

// Q4_K and Q5_K: Σ_j (d·sc_j)·Σ q·x − (dmin·m_j)·Σx over the eight sub-blocks of 32.
template <int kBits, int R>
void dot_k(const uint8_t* w, const Act256* const* a, int64_t blocks, float* result) {
  constexpr int64_t kBytes = kBits == 5 ? 176 : 144;
#if defined(__AVX512BW__)
  __m512 acc[R];
  __m256 acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), acc_min[r] = _mm256_setzero_ps();
  // Sub-block pair 2i, 2i + 1 is one 32-byte word of nibbles: broadcast to both halves, the low half keeps the low
  // nibbles (values 64i .. 64i + 31), the high half shifts the high ones down (64i + 32 .. 64i + 63).
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i mask = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
  for (int64_t b = 0; b < blocks; ++b, w += kBytes) {
    const float dw = half_value(w), dminw = half_value(w + 2);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = kBits == 5 ? w + 48 : w + 16;
    alignas(16) uint8_t sc[8], m[8];
    quant_layout::scales_mins_k4(w + 4, sc, m);
    const __m256i m16 = mins_per_sum(m);
    const __m512i sc16 = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    __m512i isum[R];
    for (int r = 0; r < R; ++r) {
      acc_min[r] = accumulate(acc_min[r], weighted_sums(m16, a[r][b]), dminw * a[r][b].d);
      isum[r] = _mm512_setzero_si512();
    }
    const __m512i high = kBits == 5 ? _mm512_broadcast_i64x4(load32(qh)) : _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      __m512i u = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load32(qs + 32 * i)), shifts), mask);
      if constexpr (kBits == 5) {
        // Bit 2i of qh[l] is value 64i + l's fifth bit, bit 2i + 1 value 64i + 32 + l's.
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * i))),
                                               _mm256_set1_epi8(static_cast<char>(2 << (2 * i))), 1);
        u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(high, bit), u, sixteen);
      }
      const __m512i scales = _mm512_permutexvar_epi16(kScalesOf32[i], sc16);
      for (int r = 0; r < R; ++r)
        isum[r] = scaled_onto(isum[r], _mm512_maddubs_epi16(u, load64(a[r][b].q + 64 * i)), scales);
    }
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(dw * a[r][b].d), acc[r]);
  }
  for (int r = 0; r < R; ++r) result[r] = _mm512_reduce_add_ps(acc[r]) - total(acc_min[r]);
#else
#if defined(__AVX2__)
  Acc acc[R] = {}, acc_min[R] = {};
#else
  float acc[R] = {}, correction[R] = {};
#endif
  for (int64_t b = 0; b < blocks; ++b, w += kBytes) {
    const float dw = half_value(w), dminw = half_value(w + 2);
    const uint8_t* scales = w + 4;
    const uint8_t* qh = w + 16;
    const uint8_t* qs = kBits == 5 ? w + 48 : w + 16;
    alignas(16) uint8_t sc[8], m[8];
    quant_layout::scales_mins_k4(scales, sc, m);
#if defined(__AVX2__)
    // The minimums' share, dmin·Σ_j m_j·Σx_j, in one vpmaddwd; its own accumulator, scaled by dmin.
    const __m256i m16 = mins_per_sum(m);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) {
      acc_min[r] = accumulate(acc_min[r], weighted_sums(m16, a[r][b]), dminw * a[r][b].d);
      isum[r] = _mm256_setzero_si256();
    }
    const __m256i mask = _mm256_set1_epi8(15);
    const __m256i high = kBits == 5 ? load32(qh) : _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256i bytes = load32(qs + 32 * i);
      __m256i lo = _mm256_and_si256(bytes, mask), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
      if constexpr (kBits == 5) {
        // Bit 2i of qh[l] for the low sub-block, 2i + 1 for the high: moved to bit 4 of each byte.
        const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * i))), bit_hi = _mm256_set1_epi8(static_cast<char>(2 << (2 * i)));
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(high, bit_lo), bit_lo), _mm256_set1_epi8(16)));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(high, bit_hi), bit_hi), _mm256_set1_epi8(16)));
      }
      const __m256i sc_lo = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * i]));
      const __m256i sc_hi = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * i + 1]));
      for (int r = 0; r < R; ++r) {
        const __m256i p_lo = pairs(lo, load32(a[r][b].q + 64 * i)), p_hi = pairs(hi, load32(a[r][b].q + 64 * i + 32));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p_lo, sc_lo));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p_hi, sc_hi));
      }
    }
    for (int r = 0; r < R; ++r) acc[r] = accumulate(acc[r], isum[r], dw * a[r][b].d);
#else
    for (int r = 0; r < R; ++r) {
      const Act256& x = a[r][b];
      int32_t s = 0;
      for (int i = 0; i < 4; ++i)
        for (int l = 0; l < 32; ++l) {
          int lo = qs[32 * i + l] & 15, hi = qs[32 * i + l] >> 4;
          if (kBits == 5) lo += (qh[l] >> (2 * i) & 1) << 4, hi += (qh[l] >> (2 * i + 1) & 1) << 4;
          s += sc[2 * i] * lo * x.q[64 * i + l] + sc[2 * i + 1] * hi * x.q[64 * i + 32 + l];
        }
      acc[r] += dw * x.d * static_cast<float>(s);
      int32_t mins = 0;
      for (int j = 0; j < 8; ++j) mins += m[j] * (x.sums[2 * j] + x.sums[2 * j + 1]);
      correction[r] -= dminw * x.d * static_cast<float>(mins);
    }
#endif
  }
  for (int r = 0; r < R; ++r) {
#if defined(__AVX2__)
    result[r] = total(acc[r]) - total(acc_min[r]);
#else
    result[r] = acc[r] + correction[r];
#endif
  }
#endif
}

// Q6_K: Σ_j (d·sc_j)·(Σ q·x − 32·Σx) over sixteen sub-blocks of 16.
template <int R>
void dot_q6_k(const uint8_t* w, const Act256* const* a, int64_t blocks, float* result) {
#if defined(__AVX512BW__)
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i mask = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
  for (int64_t b = 0; b < blocks; ++b, w += 210) {
    const float dw = half_value(w + 208);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
    const __m512i sc512 = _mm512_zextsi256_si512(sc16);
    __m512i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm512_zextsi256_si512(q6_offset(sc16, a[r][b]));
    for (int h = 0; h < 2; ++h) {
      // Half h's 128 levels: 64 bytes of low nibbles (values 0-63 low, 64-127 high) and 32 of two-bit pairs. The
      // pairs' bytes beside themselves shifted by 2 put each value's two bits at bits 0-1 (values 0-63) or 4-5
      // (64-127) of the byte beside its nibble.
      const __m512i low = load64(w + 64 * h);
      const __m256i bits = load32(w + 128 + 32 * h);
      const __m512i pairs = _mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 2), 1);
      const __m512i u0 = _mm512_or_si512(_mm512_and_si512(low, mask), _mm512_and_si512(_mm512_slli_epi16(pairs, 4), top));
      const __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), mask), _mm512_and_si512(pairs, top));
      const __m512i s0 = _mm512_permutexvar_epi16(kScalesOf16[2 * h], sc512);
      const __m512i s1 = _mm512_permutexvar_epi16(kScalesOf16[2 * h + 1], sc512);
      for (int r = 0; r < R; ++r) {
        isum[r] = scaled_onto(isum[r], _mm512_maddubs_epi16(u0, load64(a[r][b].q + 128 * h)), s0);
        isum[r] = scaled_onto(isum[r], _mm512_maddubs_epi16(u1, load64(a[r][b].q + 128 * h + 64)), s1);
      }
    }
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(dw * a[r][b].d), acc[r]);
  }
  for (int r = 0; r < R; ++r) result[r] = _mm512_reduce_add_ps(acc[r]);
#else
  Acc acc[R] = {};
  float correction[R] = {};
  for (int64_t b = 0; b < blocks; ++b, w += 210) {
    const float dw = half_value(w + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
#if defined(__AVX2__)
    // The sixteen scales as int16, and the offset's share, 32·Σ_j sc_j·Σx_j, taken from the integer sums at once.
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = q6_offset(sc16, a[r][b]);
    const __m256i mask = _mm256_set1_epi8(15), two = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      // Scales 8h .. 8h + 7 in both 128-bit lanes, for the in-lane shuffles below.
      const __m256i half_scales = _mm256_broadcastsi128_si256(h == 0 ? _mm256_castsi256_si128(sc16) : _mm256_extracti128_si256(sc16, 1));
      const uint8_t* ql = w + 64 * h;
      const __m256i bits = load32(w + 128 + 32 * h);
      const __m256i l0 = load32(ql), l32 = load32(ql + 32);
      const __m256i u[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, mask), _mm256_slli_epi16(_mm256_and_si256(bits, two), 4)),
          _mm256_or_si256(_mm256_and_si256(l32, mask), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mask), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 4), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l32, 4), mask), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 6), two), 4)),
      };
      for (int g = 0; g < 4; ++g) {
        // Values 32g .. 32g + 31 of the half: sub-blocks 8h + 2g (first 16) and 8h + 2g + 1. Scale 2g of the half
        // in the low lane's eight int16s, 2g + 1 in the high lane's.
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((4 * g + 3) << 8 | (4 * g + 2))),
                                              _mm_set1_epi16(static_cast<int16_t>((4 * g + 1) << 8 | (4 * g))));
        const __m256i scales = _mm256_shuffle_epi8(half_scales, pick);
        for (int r = 0; r < R; ++r)
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(pairs(u[g], load32(a[r][b].q + 128 * h + 32 * g)), scales));
      }
    }
    for (int r = 0; r < R; ++r) acc[r] = accumulate(acc[r], isum[r], dw * a[r][b].d);
#else
    for (int r = 0; r < R; ++r) {
      const Act256& x = a[r][b];
      const float d = dw * x.d;
      int32_t offset = 0;
      for (int j = 0; j < 16; ++j) offset += sc[j] * x.sums[j];
      correction[r] -= 32 * d * static_cast<float>(offset);
      int32_t s = 0;
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = w + 64 * h;
        const uint8_t* qh = w + 128 + 32 * h;
        const int8_t* xq = x.q + 128 * h;
        const int8_t* scale = sc + 8 * h;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          s += scale[is] * ((ql[l] & 15) | (qh[l] & 3) << 4) * xq[l];
          s += scale[is + 2] * ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) * xq[l + 32];
          s += scale[is + 4] * ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) * xq[l + 64];
          s += scale[is + 6] * ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) * xq[l + 96];
        }
      }
      acc[r] += d * static_cast<float>(s);
    }
#endif
  }
  for (int r = 0; r < R; ++r) result[r] = total(acc[r]) + correction[r];
#endif
}

// A K type's dots of one weight row with rows n0 .. n1 of the activations (act_row bytes apart), R at a time.
template <typename Dot>
void k_rows(const uint8_t* w, const uint8_t* acts, size_t act_row, int64_t n0, int64_t n1, int64_t blocks, float* out,
            int64_t OC, float bias) {
  const Act256* a[kRowsAtOnce];
  float result[kRowsAtOnce];
  int64_t n = n0;
  for (; n + kRowsAtOnce <= n1; n += kRowsAtOnce) {
    for (int r = 0; r < kRowsAtOnce; ++r) a[r] = reinterpret_cast<const Act256*>(acts + (n + r) * act_row);
    Dot::template run<kRowsAtOnce>(w, a, blocks, result);
    for (int r = 0; r < kRowsAtOnce; ++r) out[(n + r) * OC] = result[r] + bias;
  }
  for (; n < n1; ++n) {
    a[0] = reinterpret_cast<const Act256*>(acts + n * act_row);
    Dot::template run<1>(w, a, blocks, result);
    out[n * OC] = result[0] + bias;
  }
}
struct DotQ4K {
  template <int R> static void run(const uint8_t* w, const Act256* const* a, int64_t b, float* r) { dot_k<4, R>(w, a, b, r); }
};
struct DotQ5K {
  template <int R> static void run(const uint8_t* w, const Act256* const* a, int64_t b, float* r) { dot_k<5, R>(w, a, b, r); }
};
struct DotQ6K {
  template <int R> static void run(const uint8_t* w, const Act256* const* a, int64_t b, float* r) { dot_q6_k<R>(w, a, b, r); }
};

}  // namespace

void gemv_quant(QuantType type, float* out, const float* inp, const void* weight, const float* bias, int64_t N, int64_t C,
                int64_t OC) {
  const QuantFormat& f = quant_format(type);
  const bool k_type = f.block == 256;  // activations in 256-value blocks
  const int64_t blocks = C / f.block, row_bytes = blocks * f.bytes;
  // Every input row's activation blocks, made once and read for every output channel.
  thread_local std::vector<uint8_t> act;
  const size_t act_row = static_cast<size_t>(k_type ? blocks * sizeof(Act256) : blocks * sizeof(Act32));
  act.resize(act_row * static_cast<size_t>(N));
  uint8_t* to = act.data();  // this thread's buffer, by pointer: in the parallel region the name is each thread's own
  auto quantize_rows = [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (k_type)
        quantize_act256(reinterpret_cast<Act256*>(to + n * act_row), inp + n * C, C);
      else
        quantize_act32(reinterpret_cast<Act32*>(to + n * act_row), inp + n * C, C);
    }
  };
  kernels::parallel_for(N, kGemvRows, quantize_rows);  // in parallel only for a prompt's many, as gemv_x8
  const auto* rows = static_cast<const uint8_t*>(weight);
  const uint8_t* acts = act.data();
  // One loop over the channels for each type, its dot product inlined there.
  auto run = [&](auto dot) {
    split_channels(OC, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t n = 0; n < N; ++n)
          out[n * OC + o] = dot(rows + o * row_bytes, reinterpret_cast<const Act32*>(acts + n * act_row), blocks) +
                            (bias != nullptr ? bias[o] : 0.0f);
    });
  };
  // The K types: a tile of channels (about kTileBytes of weights) against four input rows at a time, each weight
  // row's blocks unpacked once for the four (dot_k): the tile and the four rows' activations (1.2 KB per 1,024
  // channels and row) stay in the first-level cache. (Every row against one weight row at a time read the rows'
  // activations from L2 for each channel: 3-10% slower on 64 rows, Xeon.)
  // Decoding's one or few rows on Intel's cores (gemv_prefetch, kernels/cpu.h): each weight row's lines fetched
  // lanes::kPrefetchAhead bytes before its dot product, where the hardware prefetchers alone left the K types'
  // stream waiting on its loads.
  const bool ahead = N < 4 && gemv_prefetch();
  auto run_k = [&](auto dot) {
    using Dot = decltype(dot);
    const int64_t tile = std::max<int64_t>(4, kTileBytes / row_bytes);
    split_channels(OC, [&](int64_t o0, int64_t o1) {
      for (int64_t t0 = o0; t0 < o1; t0 += tile) {
        const int64_t t1 = std::min(o1, t0 + tile);
        for (int64_t n0 = 0; n0 < N; n0 += kRowsAtOnce)
          for (int64_t o = t0; o < t1; ++o) {
            if (ahead) lanes::prefetch(rows + o * row_bytes + lanes::kPrefetchAhead, row_bytes);
            k_rows<Dot>(rows + o * row_bytes, acts, act_row, n0, std::min(N, n0 + kRowsAtOnce), blocks, out + o, OC,
                        bias != nullptr ? bias[o] : 0.0f);
          }
      }
    });
  };
  switch (type) {
    case QuantType::Q8_0: return run(dot_q8_0);
    case QuantType::Q4_0: return run(dot_32<4, false>);
    case QuantType::Q4_1: return run(dot_32<4, true>);
    case QuantType::Q5_0: return run(dot_32<5, false>);
    case QuantType::Q5_1: return run(dot_32<5, true>);
    case QuantType::Q4_K: return run_k(DotQ4K{});
    case QuantType::Q5_K: return run_k(DotQ5K{});
    case QuantType::Q6_K: return run_k(DotQ6K{});
    case QuantType::Q8_K: break;  // an activation format, never a weight
  }
}

// Q4_0 and Q8_0 rows repacked eight at a time (quant.h): per block, the eight rows' integer sums land in the eight
// lanes of one vector (four input bytes broadcast against each word), and one fused multiply-add scales the eight
// by their rows' scales times the input's. R input rows go together: each word is loaded and unpacked once for all
// of them (a prompt's rows four at a time); every row's sums are the same operations whatever R, so a row's result
// does not depend on its neighbours. What differs between the types is a block's integer sums (Q4X8, Q8X8 below);
// this is the rest.
namespace {

// Several input rows on Intel's cores (gemv_prefetch): each block's lines are also asked into L2 about 24 KiB
// ahead. The L2 streamer does not cross a 4 KiB page, and with eight rows' products between its requests it fell
// behind the weights' stream (GPT-2-124M's matrices at 8 rows, 2 threads, 8 alternating rounds on Emerald
// Rapids: median 6.6 against 8.0 ms over ten alternating pairs, 4 rows 4.0 against 6.6; docs/BENCHMARKS.md).
constexpr int64_t kFarAhead = 24 << 10;
[[maybe_unused]] inline void far_ahead(const uint8_t* w, int64_t block_bytes) {  // the AVX2 and AVX-512 kernels' alone
  lanes::prefetch_l2(w + kFarAhead, block_bytes);
}

template <typename Type, int R>
void x8_rows(const uint8_t* w, const Act32* const* a, int64_t blocks, const float* bias, float* const* out, bool far) {
#if defined(__AVX2__)
  __m256 acc[R];
  for (int n = 0; n < R; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, w += Type::kGroupBlockBytes) {
    if (R >= 4 && far) far_ahead(w, Type::kGroupBlockBytes);
#if !defined(__AVX512F__)
    // The AVX2 set: the block's lines about 2 KiB ahead, as Q8_0's (8 streams of GPT-2-124M Q4_0 faster in four
    // alternating pairs of five on the AVX2 EPYC, 1.03-1.26×; docs/BENCHMARKS.md). Not measured in 512 bits.
    if constexpr (R >= 4)
      for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + 64 * l), _MM_HINT_T0);
#endif
    const __m256 scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    __m256i isum[R];
    Type::template sums<R>(w + 16, a, b, isum);
    for (int n = 0; n < R; ++n)
      acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[n]), _mm256_mul_ps(scales, _mm256_set1_ps(a[n][b].d)), acc[n]);
  }
  for (int n = 0; n < R; ++n) {
    if (bias != nullptr) acc[n] = _mm256_add_ps(acc[n], _mm256_loadu_ps(bias));
    _mm256_storeu_ps(out[n], acc[n]);
  }
#else
  (void)far;
  for (int n = 0; n < R; ++n) {
    float acc[8] = {};
    const uint8_t* block = w;
    for (int64_t b = 0; b < blocks; ++b, block += Type::kGroupBlockBytes)
      for (int r = 0; r < 8; ++r)
        acc[r] += static_cast<float>(Type::sum(block + 16, a[n][b], r)) * (half_value(block + 2 * r) * a[n][b].d);
    for (int r = 0; r < 8; ++r) out[n][r] = acc[r] + (bias != nullptr ? bias[r] : 0.0f);
  }
#endif
}

// Q4_0: four words of nibbles, the low nibbles values 4m .. 4m + 3 of each row, the high ones 4m + 16 ..; the
// offset enters as −8·Σx in every lane.
struct Q4X8 {
  static constexpr int64_t kGroupBlockBytes = 8 * 18;
  template <int R>
  static void rows(const uint8_t* w, const Act32* const* a, int64_t blocks, const float* bias, float* const* out,
                   bool far) {
    x8_rows<Q4X8, R>(w, a, blocks, bias, out, far);
  }
#if defined(__AVX2__)
  template <int R>
  static void sums(const uint8_t* words, const Act32* const* a, int64_t b, __m256i* isum) {
    const __m256i mask = _mm256_set1_epi8(15);
    for (int n = 0; n < R; ++n) isum[n] = _mm256_set1_epi32(-8 * a[n][b].sum);
    for (int m = 0; m < 4; ++m) {
      const __m256i word = load32(words + 32 * m);
      const __m256i low = _mm256_and_si256(word, mask), high = _mm256_and_si256(_mm256_srli_epi16(word, 4), mask);
      for (int n = 0; n < R; ++n) {
        int32_t x_low, x_high;
        std::memcpy(&x_low, a[n][b].q + 4 * m, 4);
        std::memcpy(&x_high, a[n][b].q + 16 + 4 * m, 4);
        isum[n] = sum32_onto(isum[n], low, _mm256_set1_epi32(x_low));
        isum[n] = sum32_onto(isum[n], high, _mm256_set1_epi32(x_high));
      }
    }
  }
#else
  static int32_t sum(const uint8_t* words, const Act32& a, int r) {
    int32_t s = -8 * a.sum;
    for (int m = 0; m < 4; ++m)
      for (int i = 0; i < 4; ++i) {
        const uint8_t byte = words[32 * m + 4 * r + i];
        s += (byte & 15) * a.q[4 * m + i] + (byte >> 4) * a.q[16 + 4 * m + i];
      }
    return s;
  }
#endif
};

// Q8_0: four 64-byte words, lane r (64 bits) of word m holding row r's values 8m .. 8m + 7 as unsigned bytes
// w + 128 (quant.h); the eight input values are broadcast to every lane. Each row's block sum lands in a pair of
// 32-bit lanes (its values 8m .. 8m + 3 and 8m + 4 .. 8m + 7), each pair scaled by the row's scale and the two
// added after the last block. With VNNI in 512 bits one vpdpbusd per word and input row does all eight weight rows:
// Σ (w + 128)·x = Σ w·x + 128·Σx, and the input block's −128·Σx (Act32::sum128, one number per input row and
// block) goes into the first lane of each row's pair, so that no product is spent on the offset. Without VNNI,
// 256 bits hold four rows and the signed product goes through |w| times x with w's sign. Every row's operations
// are the same whatever R.
struct Q8X8 {
  static constexpr int64_t kGroupBlockBytes = 8 * 34;
  template <int R>
  static void rows(const uint8_t* w, const Act32* const* a, int64_t blocks, const float* bias, float* const* out,
                   bool far) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m512i pairs = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 acc[R];
    for (int n = 0; n < R; ++n) acc[n] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kGroupBlockBytes) {
      // Several rows' work on a block leaves the hardware prefetcher behind the weights' stream: fetch them
      // about eight blocks ahead (one row keeps up alone).
      if constexpr (R >= 4) {
        for (int l = 0; l < 5; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + 64 * l), _MM_HINT_T0);
        if (far) far_ahead(w, kGroupBlockBytes);
      }
      const __m512 scales = _mm512_permutexvar_ps(
          pairs, _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)))));
      // Word by word across the rows, so that the rows' sums are independent chains.
      __m512i sum[R];
      for (int n = 0; n < R; ++n) sum[n] = _mm512_setzero_si512();
      for (int m = 0; m < 4; ++m) {
        const __m512i q = _mm512_loadu_si512(w + 16 + 64 * m);
        for (int n = 0; n < R; ++n) {
          int64_t eight;
          std::memcpy(&eight, a[n][b].q + 8 * m, 8);
          sum[n] = _mm512_dpbusd_epi32(sum[n], q, _mm512_set1_epi64(eight));
        }
      }
      // The offset after the products (in the first lane of each row's pair), not as their start: a sum that
      // starts from a masked load waited on it, 8-10% slower with the weights out of cache (Zen 4).
      for (int n = 0; n < R; ++n) sum[n] = _mm512_mask_add_epi32(sum[n], 0x5555, sum[n], _mm512_set1_epi32(a[n][b].sum128));
      for (int n = 0; n < R; ++n)
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[n]), _mm512_mul_ps(scales, _mm512_set1_ps(a[n][b].d)), acc[n]);
    }
    const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int n = 0; n < R; ++n) {
      __m256 y = _mm256_add_ps(_mm512_castps512_ps256(_mm512_permutexvar_ps(even, acc[n])),
                               _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, acc[n])));
      if (bias != nullptr) y = _mm256_add_ps(y, _mm256_loadu_ps(bias));
      _mm256_storeu_ps(out[n], y);
    }
#elif defined(__AVX2__)
    // Rows 0-3 in the low 32 bytes of a word, 4-7 in the high; a horizontal add joins each row's pair, leaving the
    // rows in the order 0 1 4 5 2 3 6 7 (the scales are put in that order, and the sums back at the end).
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // the stored bytes w + 128 back to w
    (void)far;  // far_ahead: level or slower on the Xeon (ATTEND_ISA=avx2); on the AVX2 EPYC, slower than below
    __m256 acc[R];
    for (int n = 0; n < R; ++n) acc[n] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kGroupBlockBytes) {
      // As in 512 bits: four rows' work on a block left the AVX2 EPYC's prefetcher behind the weights (8 streams of
      // GPT-2-124M Q8_0 379-391 → 474-491 tokens/s, 4 streams 285-362 → 411-455; docs/BENCHMARKS.md).
      if constexpr (R >= 4)
        for (int l = 0; l < 5; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + 64 * l), _MM_HINT_T0);
      const __m256 scales = _mm256_permutevar8x32_ps(
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))), order);
      __m256i low[R], high[R];
      for (int n = 0; n < R; ++n) low[n] = high[n] = _mm256_setzero_si256();
      for (int m = 0; m < 4; ++m) {
        const __m256i w_low = _mm256_xor_si256(load32(w + 16 + 64 * m), flip),
                      w_high = _mm256_xor_si256(load32(w + 48 + 64 * m), flip);
        const __m256i m_low = _mm256_sign_epi8(w_low, w_low), m_high = _mm256_sign_epi8(w_high, w_high);
        for (int n = 0; n < R; ++n) {
          int64_t eight;
          std::memcpy(&eight, a[n][b].q + 8 * m, 8);
          const __m256i x = _mm256_set1_epi64x(eight);
          low[n] = sum32_onto(low[n], m_low, _mm256_sign_epi8(x, w_low));
          high[n] = sum32_onto(high[n], m_high, _mm256_sign_epi8(x, w_high));
        }
      }
      for (int n = 0; n < R; ++n)
        acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(low[n], high[n])),
                                 _mm256_mul_ps(scales, _mm256_set1_ps(a[n][b].d)), acc[n]);
    }
    for (int n = 0; n < R; ++n) {
      __m256 y = _mm256_permutevar8x32_ps(acc[n], order);
      if (bias != nullptr) y = _mm256_add_ps(y, _mm256_loadu_ps(bias));
      _mm256_storeu_ps(out[n], y);
    }
#else
    (void)far;
    for (int n = 0; n < R; ++n) {
      float acc[8] = {};
      const uint8_t* block = w;
      for (int64_t b = 0; b < blocks; ++b, block += kGroupBlockBytes)
        for (int r = 0; r < 8; ++r) {
          int32_t s = 0;
          for (int m = 0; m < 4; ++m)
            for (int i = 0; i < 8; ++i)
              s += static_cast<int8_t>(block[16 + 64 * m + 8 * r + i] ^ 0x80) * a[n][b].q[8 * m + i];
          acc[r] += static_cast<float>(s) * (half_value(block + 2 * r) * a[n][b].d);
        }
      for (int r = 0; r < 8; ++r) out[n][r] = acc[r] + (bias != nullptr ? bias[r] : 0.0f);
    }
#endif
  }
};

// The repacked kernels' loop: the input rows quantized once, the groups of eight channels shared between the
// threads, each group's input rows eight (AVX2: four) at a time. Decoding's few rows are quantized by each thread
// for itself as it starts (the same numbers, without a parallel region for them alone), a prompt's many in
// parallel beforehand.
template <typename Type>
void gemv_x8(float* out, const float* inp, const uint8_t* repacked, const float* bias, int64_t N, int64_t C, int64_t OC) {
  const int64_t blocks = C / 32, groups = OC / 8, group_bytes = blocks * Type::kGroupBlockBytes;
  thread_local std::vector<Act32> act;  // each thread's own
  auto quantize = [&](Act32* to, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) quantize_act32(to + n * blocks, inp + n * C, C);
  };
  const bool ahead = N < 4 && gemv_prefetch();  // decoding on Intel's cores: each group fetches the next one
  const bool far = N >= 4 && gemv_prefetch();  // several rows on Intel's cores: far_ahead
  constexpr int64_t kOwnCopy = 16;  // rows up to which each thread quantizes them itself
  const Act32* shared = nullptr;
  if (N > kOwnCopy) {
    act.resize(static_cast<size_t>(N * blocks));
    Act32* to = act.data();
    kernels::parallel_for(N, kGemvRows, [&](int64_t n0, int64_t n1) { quantize(to, n0, n1); });
    shared = to;
  }
  split_channels(groups, [&](int64_t g0, int64_t g1) {
    const Act32* acts = shared != nullptr ? shared : act.data();
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* w = repacked + g * group_bytes;
      const float* b = bias != nullptr ? bias + 8 * g : nullptr;
      if (ahead) lanes::prefetch(w + group_bytes, group_bytes);
      // Rows a pass over the group's blocks: eight where AVX-512's 32 vector registers hold their sums (each row's
      // arithmetic is the same whatever the pass holds), four with AVX2's 16.
#if defined(__AVX512F__)
      constexpr int64_t kPass = 8;
#else
      constexpr int64_t kPass = 4;
#endif
      for (int64_t n0 = 0; n0 < N; n0 += kPass) {
        const Act32* a[kPass];
        float* o[kPass];
        const int64_t rows = std::min<int64_t>(kPass, N - n0);
        for (int64_t n = 0; n < rows; ++n) a[n] = acts + (n0 + n) * blocks, o[n] = out + (n0 + n) * OC + 8 * g;
        switch (rows) {
#if defined(__AVX512F__)
          case 8: Type::template rows<8>(w, a, blocks, b, o, far); break;
          case 7: Type::template rows<7>(w, a, blocks, b, o, far); break;
          case 6: Type::template rows<6>(w, a, blocks, b, o, far); break;
          case 5: Type::template rows<5>(w, a, blocks, b, o, far); break;
#endif
          case 4: Type::template rows<4>(w, a, blocks, b, o, far); break;
          case 3: Type::template rows<3>(w, a, blocks, b, o, far); break;
          case 2: Type::template rows<2>(w, a, blocks, b, o, far); break;
          default: Type::template rows<1>(w, a, blocks, b, o, far); break;
        }
      }
    }
  }, 8, [&] {
    if (shared != nullptr) return;
    act.resize(static_cast<size_t>(N * blocks));
    quantize(act.data(), 0, N);
  });
}

}  // namespace

void gemv_q8_0x8(float* out, const float* inp, const uint8_t* repacked, const float* bias, int64_t N, int64_t C,
                 int64_t OC) {
  gemv_x8<Q8X8>(out, inp, repacked, bias, N, C, OC);
}

void gemv_q4_0x8(float* out, const float* inp, const uint8_t* repacked, const float* bias, int64_t N, int64_t C,
                 int64_t OC) {
  gemv_x8<Q4X8>(out, inp, repacked, bias, N, C, OC);
}

}  // namespace attend::kernels::ATTEND_ISA

#pragma GCC diagnostic pop

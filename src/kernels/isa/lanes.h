// One register of floats in GCC's vector extension: 16 with AVX-512, 8 with AVX2, 4 with SSE2 (the generic
// set), and the loads that widen stored types into it: bf16 (the top half of a float), fp16 and int8.
// Written element by element, GCC kept the streaming loops of decoding scalar; written like this it
// vectorises them for whichever instruction set the file is compiled for. The vector is the set's own
// register width: a 64-byte vector on AVX2 is split into halves that GCC 12 moves through the stack and
// general registers (the bf16 gemv ran at a quarter of the bandwidth bound). Also the scalar fp16
// conversions, with F16C where the set has it and exact integer code otherwise.
//
// Only for src/kernels/isa/: the vectors never cross a call boundary between translation units, so the
// ABI GCC warns about (sets without AVX-512 pass them differently) does not matter.
#pragma once

#include "kernels/isa/isa.h"

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attend::kernels::ATTEND_ISA::lanes {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#elif defined(__AVX2__)
constexpr int64_t kLanes = 8;
#else
constexpr int64_t kLanes = 4;
#endif
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// bf16 widens exactly: each value is the top half of its float.
inline Lanes load_bf16(const uint16_t* p) {
  Lanes v;
#if defined(__AVX2__) && !defined(__AVX512F__)
  // One vpmovzxwd from memory; through the vector extension GCC 12 widens each half of the register apart.
  const __m256i words = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  std::memcpy(&v, &words, sizeof v);
#else
  using Halves = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
  using Words = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
  Halves h;
  std::memcpy(&h, p, sizeof h);
  const Words bits = __builtin_convertvector(h, Words) << 16;
  std::memcpy(&v, &bits, sizeof v);
#endif
  return v;
}

// IEEE half → float, exactly, without F16C: the exponent is rebiased (15 → 127); subnormal halves are
// m·2⁻²⁴, which float holds exactly.
inline float widen_f16_bits(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // infinity, or NaN made quiet with its payload kept (as vcvtph2ps does)
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | mantissa << 13);
  }
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | (exponent + 112) << 23 | mantissa << 13);
}

// float → IEEE half, rounded to nearest even, without F16C. Normal results: rebias the exponent and round
// the 13 dropped bits (adding 0xFFF plus the kept part's lowest bit carries exactly when rounding up, into
// the exponent when the mantissa overflows). Subnormal results: adding 0.5 makes the float's unit in the
// last place 2⁻²⁴, the half's subnormal step, so the float addition does the rounding. NaN stays a quiet NaN.
inline uint16_t narrow_f16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7E00u | ((x >> 13) & 0x3FFu);
  if (x >= 0x477FF000u) return sign | 0x7C00u;  // ≥ 65520 (halfway past 65504, the largest half): infinity
  if (x < 0x38800000u) {                        // below 2⁻¹⁴, the smallest normal half
    const float shifted = std::bit_cast<float>(x) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f));
  }
  x += (uint32_t{15} - 127u) << 23;
  x += 0xFFFu + ((x >> 13) & 1u);
  return sign | static_cast<uint16_t>(x >> 13);
}

inline float widen_f16(uint16_t bits) {
#if defined(__F16C__)
  return _cvtsh_ss(bits);
#else
  return widen_f16_bits(bits);
#endif
}

inline uint16_t narrow_f16(float x) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#else
  return narrow_f16_bits(x);
#endif
}

inline Lanes load_f16(const uint16_t* p) {
  Lanes out;
#if defined(__AVX512F__)
  // One vcvtph2ps of 16 halves. Through a _Float16 vector GCC 12 (without AVX512-FP16) converts the halves
  // one by one, which made an fp16 KV cache slower to read than an fp32 one.
  const __m512 v = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&out, &v, sizeof out);
#elif defined(__F16C__)
  const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::memcpy(&out, &v, sizeof out);
#else
  for (int64_t i = 0; i < kLanes; ++i) out[i] = widen_f16_bits(p[i]);
#endif
  return out;
}

inline Lanes load(const int8_t* p) {
  using Bytes = int8_t __attribute__((vector_size(kLanes)));
  Bytes b;
  std::memcpy(&b, p, sizeof b);
  return __builtin_convertvector(b, Lanes);
}

// Pairwise, halving the vector until one lane is left (log₂ kLanes adds, where a lane-by-lane loop was a
// chain of kLanes − 1 dependent adds: the cost of a decode attention score, whose dot product is only 64 long).
inline float sum(Lanes v) {
  float x[kLanes];
  std::memcpy(x, &v, sizeof v);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t i = 0; i < width; ++i) x[i] += x[i + width];
  return x[0];
}

inline float widen_bf16(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

}  // namespace attend::kernels::ATTEND_ISA::lanes

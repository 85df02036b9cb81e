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

#include "kernels/half_bits.h"
#include "kernels/isa/isa.h"

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 takes the undefined upper lanes inside AVX-512's intrinsics (_mm512_extractf64x4_pd,
// _mm512_castpd256_pd512) for uninitialized values (GCC bug 105593, fixed in 13): a warning at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

// How far ahead of their use decoding's gemv fetches weights in software (kernels/cpu.h's gemv_prefetch).
constexpr int64_t kPrefetchAhead = 2048;

// Asks for the cache lines of the bytes [p, p + bytes); a prefetch never faults, so past an array's end is harmless.
inline void prefetch(const void* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b);
}
// The same into L2 only (prefetcht1).
inline void prefetch_l2(const void* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b, 0, 2);
}

// bf16 widens exactly: each value is the top half of its float.
inline Lanes load_bf16(const uint16_t* p) {
  Lanes v;
  // One vpmovzxwd from memory and one shift. Through the vector extension GCC 12 widens each half of the register
  // apart (a load, two vpmovzxwd, an extract and an insert): on Intel's cores, whose 512-bit shuffles all issue on
  // one port, that bounded the one-row bf16 gemv at about half the rate of fp16's (docs/BENCHMARKS.md).
#if defined(__AVX512F__)
  const __m512i halves = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i words = _mm512_slli_epi32(halves, 16);
  std::memcpy(&v, &words, sizeof v);
#elif defined(__AVX2__)
  const __m256i halves = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i words = _mm256_slli_epi32(halves, 16);
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

// The exact scalar conversions without F16C (kernels/half_bits.h).
using half_bits::narrow_f16_bits;
using half_bits::widen_f16_bits;

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
  // Two 256-bit vcvtph2ps of 8 halves each, joined: the same lanes as one 512-bit vcvtph2ps of 16, which streamed
  // fp16 weights 10-17% slower on Zen 4 (Llama-3.2-1B's generation on one thread: 7.2-8.1 against 7.8-9.4
  // tokens/s, where bf16 rows ran at 10; docs/BENCHMARKS.md). Through a _Float16 vector GCC 12 (without
  // AVX512-FP16) converts the halves one by one, which made an fp16 KV cache slower to read than an fp32 one.
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  const __m512 v =
      _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
  std::memcpy(&out, &v, sizeof out);
#elif defined(__F16C__)
  const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::memcpy(&out, &v, sizeof out);
#else
  for (int64_t i = 0; i < kLanes; ++i) out[i] = widen_f16_bits(p[i]);
#endif
  return out;
}

// One vpmovsxbd from memory and one conversion (GCC 12's vector extension widens in two steps with extracts).
inline Lanes load(const int8_t* p) {
#if defined(__AVX512F__)
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  using Bytes = int8_t __attribute__((vector_size(kLanes)));
  Bytes b;
  std::memcpy(&b, p, sizeof b);
  const Lanes v = __builtin_convertvector(b, Lanes);
#endif
  Lanes out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// Pairwise, halving the vector until one lane is left: lane i + lane i + w for w = kLanes/2, ..., 1 (log₂ kLanes
// adds, where a lane-by-lane loop was a chain of kLanes − 1 dependent adds: the cost of a decode attention score,
// whose dot product is only 64 long). The same tree on every set, so the same bits; AVX2 and AVX-512 halve in
// registers (GCC kept the array below in memory: a batched gemv's eight sums a weight row, 8% of its time).
inline float sum(Lanes v) {
#if defined(__AVX512F__)
  const __m512 z = reinterpret_cast<__m512>(v);
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(z),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
#elif defined(__AVX2__)
  const __m256 h = reinterpret_cast<__m256>(v);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));  // lanes 0, 1 + lanes 2, 3
  q = _mm_add_ss(q, _mm_movehdup_ps(q));   // lane 0 + lane 1
  return _mm_cvtss_f32(q);
#else
  float x[kLanes];
  std::memcpy(x, &v, sizeof v);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t i = 0; i < width; ++i) x[i] += x[i + width];
  return x[0];
#endif
}

inline float widen_bf16(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

}  // namespace attend::kernels::ATTEND_ISA::lanes

#pragma GCC diagnostic pop

// 16 floats at a time in GCC's vector extension (one AVX-512 register; a pair of AVX2 ones elsewhere), and
// the loads that widen stored types into them: bf16 (the top half of a float), fp16 (vcvtph2ps) and int8.
// Written element by element, GCC kept the streaming loops of decoding scalar; written like this it
// vectorises them. Callers are the memory-bound decode kernels (matmul.cpp's gemv, attention_decode.cpp).
//
// Only for use inside .cpp files: the vectors never cross a call boundary between translation units, so
// the ABI GCC warns about (builds without -mavx512f pass them differently) does not matter.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attend::kernels::lanes {

using Lanes = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// bf16 widens exactly: each value is the top half of its float.
inline Lanes load_bf16(const uint16_t* p) {
  using Halves = uint16_t __attribute__((vector_size(32)));
  using Words = uint32_t __attribute__((vector_size(64)));
  Halves h;
  std::memcpy(&h, p, sizeof h);
  const Words bits = __builtin_convertvector(h, Words) << 16;
  Lanes v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

inline Lanes load_f16(const uint16_t* p) {
#if defined(__AVX512F__)
  // One vcvtph2ps of 16 halves. Through a _Float16 vector GCC 12 (without AVX512-FP16) loads the halves
  // one by one, which made an fp16 KV cache slower to read than an fp32 one.
  const __m512 v = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  Lanes out;
  std::memcpy(&out, &v, sizeof out);
  return out;
#else
  using Halves = _Float16 __attribute__((vector_size(32)));
  Halves h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, Lanes);
#endif
}

inline Lanes load(const int8_t* p) {
  using Bytes = int8_t __attribute__((vector_size(16)));
  Bytes b;
  std::memcpy(&b, p, sizeof b);
  return __builtin_convertvector(b, Lanes);
}

// Pairwise, halving the vector four times: 8 instructions, where a lane-by-lane loop was a chain of 15
// dependent adds (the cost of a decode attention score, whose dot product is only 64 long).
inline float sum(Lanes v) {
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return v[0];
}

// One value of each stored type, for the tails shorter than a vector.
inline float widen_bf16(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

inline float widen_f16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

}  // namespace attend::kernels::lanes

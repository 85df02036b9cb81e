// The 16-bit storage conversions (the KV cache, mixed precision), streamed: fp16 with F16C where the
// instruction set has it (vcvtps2ph / vcvtph2ps, 8 values an instruction), exact integer code otherwise.
#include "kernels/isa/isa.h"
#include "kernels/isa/lanes.h"
#include "kernels/parallel.h"

#include <bit>

namespace attend::kernels::ATTEND_ISA {
namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

void float_to_half(uint16_t* out, const float* inp, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
#if defined(__F16C__)
    for (; i + 8 <= i1; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(inp + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
#endif
    for (; i < i1; ++i) out[i] = lanes::narrow_f16(inp[i]);
  });
}

void half_to_float(float* out, const uint16_t* inp, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
#if defined(__F16C__)
    for (; i + 8 <= i1; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(inp + i))));
#endif
    for (; i < i1; ++i) out[i] = lanes::widen_f16(inp[i]);
  });
}

void float_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  // Branch-free so that it vectorises: round to nearest even by adding 0x7FFF plus the kept part's lowest bit;
  // a NaN keeps its top bits and is made quiet (rounding could otherwise carry it into infinity).
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(inp[i]);
      const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
      const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      out[i] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x40u : rounded);
    }
  });
}

void bf16_to_float(float* out, const uint16_t* inp, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = lanes::widen_bf16(inp[i]);
  });
}

}  // namespace attend::kernels::ATTEND_ISA

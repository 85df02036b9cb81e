// IEEE half ↔ float one value at a time, exactly, in integer code (no F16C): what the isa/ kernels' lanes use
// where the set has no F16C, and what reads a block's fp16 scale outside them (kernels/quant.cpp), where calling the
// dispatched array conversion for each 32 values cost more than the dequantizing.
#pragma once

#include <bit>
#include <cstdint>

#include "kernels/isa_namespace.h"

namespace attend::kernels::half_bits {
inline namespace ATTEND_ISA_NAMESPACE {

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

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::half_bits

// What both the reference code (quant.cpp) and the per-set dot products (isa/quant_gemv.cpp) read from a K
// block: its eight sub-blocks' 6-bit scales and minimums, packed in twelve bytes (quant.h draws the packing).
#pragma once

#include "kernels/isa_namespace.h"

#include <cstdint>
#include <cstring>

namespace attend::kernels::quant_layout {
inline namespace ATTEND_ISA_NAMESPACE {

// Sub-block j's scale and minimum of Q4_K/Q5_K's twelve scale bytes `s`.
inline void scale_min_k4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63, *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

// All eight at once, four bytes at a time: scales[j] and mins[j] for j = 0..7 (the same numbers as
// scale_min_k4). Words w0, w1, w2 of `s` hold bytes 0-3, 4-7, 8-11; scales 0-3 are w0's low six bits, mins 0-3
// w1's; scales 4-7 are w2's low nibbles with w0's top two bits above them, mins 4-7 w2's high nibbles with w1's.
inline void scales_mins_k4(const uint8_t* s, uint8_t* scales, uint8_t* mins) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4), std::memcpy(&w1, s + 4, 4), std::memcpy(&w2, s + 8, 4);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t sc[2] = {w0 & low6, (w2 & low4) | ((w0 >> 6) & low2) << 4};
  const uint32_t m[2] = {w1 & low6, ((w2 >> 4) & low4) | ((w1 >> 6) & low2) << 4};
  std::memcpy(scales, sc, 8), std::memcpy(mins, m, 8);
}

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::quant_layout

// What both the reference code (quant.cpp) and the per-set dot products (isa/quant_gemv.cpp) read from a K
// block: its eight sub-blocks' 6-bit scales and minimums, packed in twelve bytes (quant.h draws the packing).
#pragma once

#include "kernels/isa_namespace.h"

#include <cstdint>

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

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::quant_layout

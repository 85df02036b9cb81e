// Storage conversions: fp16 and bf16 (the KV cache, 001 §10, 004 §10.4; mixed precision, 003 §13.2), and int8
// with one scale per row.
#pragma once

#include "kernels/gemm.h"

#include <cstdint>

namespace attend::kernels {

// IEEE half precision, round to nearest even (F16C on x86 when the compiler may use it).
void float_to_half(uint16_t* out, const float* inp, int64_t n);
void half_to_float(float* out, const uint16_t* inp, int64_t n);

// bfloat16: the top 16 bits of a float. Rounding to it is to nearest, ties to even; NaN stays NaN.
void float_to_bf16(uint16_t* out, const float* inp, int64_t n);
void bf16_to_float(float* out, const uint16_t* inp, int64_t n);

// Rounds to the 16-bit format `type` (either of the two above), and widens back from it.
void round_to_half(Half type, uint16_t* out, const float* inp, int64_t n);
void widen_half(Half type, float* out, const uint16_t* inp, int64_t n);

// Symmetric int8 per row of C values: scale = max|x|/127, q = round(x/scale) ∈ [−127, 127], x ≈ q·scale.
// The rounding error of each element is at most scale/2 = max|x|/254.
void quantize_rows_int8(int8_t* out,       // (N, C)
                        float* scales,     // (N)
                        const float* inp,  // (N, C)
                        int64_t N, int64_t C);
void dequantize_rows_int8(float* out, const int8_t* inp, const float* scales, int64_t N, int64_t C);

}  // namespace attend::kernels

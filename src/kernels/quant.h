// Block-quantized weights in ggml's layouts (the tensors of GGUF files): a row of n values is n / block blocks,
// each a few scales and small integers, so that a file written here runs in llama.cpp and one of llama.cpp's runs
// here. Reference (scalar) quantization and dequantization; the dot products that read them are in the kernel
// tables (kernel_table.h).
//
//   type  block bytes bits/w  one block holds                              a value is
//   Q8_0    32    34   8.5    d (fp16), q[32] int8                         d·q
//   Q4_0    32    18   4.5    d, 32 nibbles                                d·(q − 8)
//   Q4_1    32    20   5.0    d, m (fp16), 32 nibbles                      d·q + m
//   Q5_0    32    22   5.5    d, the fifth bits (32 in 4 bytes), nibbles   d·(q − 16)
//   Q5_1    32    24   6.0    d, m, fifth bits, nibbles                    d·q + m
//   Q4_K   256   144   4.5    d, dmin (fp16), 8 × (6-bit scale, 6-bit min), 256 nibbles
//                                                                          d·sc_j·q − dmin·m_j (sub-block j of 32)
//   Q5_K   256   176   5.5    Q4_K's and the fifth bits                    the same, q in [0, 31]
//   Q6_K   256   210   6.5625 low nibbles, high 2 bits, 16 int8 scales, d  d·sc_j·(q − 32) (sub-block j of 16)
//   Q8_K   256   292   9.125  d (fp32), q[256] int8, 16 sums of 16 q       d·q (activations for the K types' dots)
//
// Nibble order: in the 32-value types byte j holds value j (low nibble) and value j + 16 (high nibble); in
// Q4_K/Q5_K each 32 bytes hold two sub-blocks of 32, the first in the low nibbles. The fifth bit of Q5_0/Q5_1
// value j is bit j of the little-endian 32-bit word; of Q5_K value 64·i + l (+ 32) it is bit 2i (2i + 1) of
// qh[l]. Q6_K's 256 values are two halves of 128; in half h, ql[64h + l] holds values l and l + 64 of the half
// (low, high nibble), ql[64h + 32 + l] values l + 32 and l + 96, and qh[32h + l] their top two bits in the
// order l, l + 32, l + 64, l + 96 from bit 0. Q4_K/Q5_K's twelve scale bytes: sub-blocks 0-3 have scale
// s[j] & 63 and min s[j + 4] & 63; sub-blocks 4-7 have scale (s[j + 4] & 15) | (s[j − 4] >> 6) << 4 and min
// (s[j + 4] >> 4) | (s[j] >> 6) << 4.
#pragma once

#include <cstdint>

namespace attend::kernels {

enum class QuantType : uint8_t { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K };

struct QuantFormat {
  const char* name;  // "q8_0", ...
  int64_t block;     // values per block
  int64_t bytes;     // bytes per block
};
const QuantFormat& quant_format(QuantType type);
// The bytes of a row of n values (n a multiple of the block).
int64_t quant_row_bytes(QuantType type, int64_t n);

// n values (a multiple of the type's block) to their blocks, choosing each block's scales (and minimums) to
// minimise Σ w_i·(x_i − x̂_i)² over a search of candidate scales. `importance` (n values, or nullptr) weighs
// the columns, as activation statistics from a calibration text do (the squared activations' mean per input
// column): w_i = importance_i·√(σ² + x_i²), σ² the row's mean square; without it the 32-value types weigh every
// value alike, and the K types fit as llama-quantize does (Q4_K and Q5_K by σ_j + |x_i|, σ_j the sub-block's root
// mean square, Q6_K by x_i²), so that their blocks are llama-quantize's.
void quantize_row(QuantType type, void* blocks, const float* x, int64_t n, const float* importance = nullptr);
// The blocks' n values, as ggml's dequantize_row_* computes them.
void dequantize_row(QuantType type, float* out, const void* blocks, int64_t n);

// Q4_0 rows repacked eight at a time for decoding (the gemv_q4_0x8 kernels): for each group of eight rows and each
// block b, the eight rows' fp16 scales (16 bytes), then four 32-byte words m = 0..3 holding bytes 4m .. 4m + 3 of
// each row's sixteen nibble bytes, row after row. Byte 4r + i of word m is row r's byte 4m + i: its low nibble is
// value 4m + i, its high nibble value 4m + 16 + i. So one word's low (high) nibbles are, in 32-bit lane r, row r's
// four values 4m .. 4m + 3 (4m + 16 ..): an integer dot product with four inputs broadcast to every lane gives
// the eight rows' partial sums in one instruction, and one fused multiply-add scales all eight.
// Rows past the last whole group are not repacked (the plain gemv takes them).
int64_t q4_0x8_bytes(int64_t rows, int64_t n);
void repack_q4_0x8(uint8_t* out, const void* blocks, int64_t rows, int64_t n);
// Q8_0 likewise with words of eight bytes: per group and block, the eight scales (16 bytes), then four 64-byte words
// m = 0..3 whose 64-bit lane r holds row r's values 8m .. 8m + 7 as unsigned bytes w + 128 (VNNI's products take
// one unsigned operand; the input block's −128·Σx puts the offset back). Eight inputs broadcast to every 64-bit
// lane meet all eight rows in one 512-bit integer dot product (each row's sum in a pair of 32-bit lanes), or four
// rows in 256 bits.
int64_t q8_0x8_bytes(int64_t rows, int64_t n);
void repack_q8_0x8(uint8_t* out, const void* blocks, int64_t rows, int64_t n);

// Σ_i dequant(row)_i · x_i over n values, in double: the reference the dot-product kernels are checked against.
double quant_dot_reference(QuantType type, const void* blocks, const float* x, int64_t n);

}  // namespace attend::kernels

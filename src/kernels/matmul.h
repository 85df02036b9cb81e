// The linear layer's matmul and the token embedding, forward and backward.
//
// Weights use PyTorch's nn.Linear layout: weight is (OC, C), so out = inp · weightᵀ + bias.
// Backward *adds* into every gradient buffer; the caller zeroes them.
#pragma once

#include "kernels/gemm.h"
#include "kernels/quant.h"

#include <cstdint>

namespace attend::kernels {

// out = inp · weightᵀ + bias                          (000 §2.1: Z = XW + b)
template <typename T>
void matmul_forward(T* out,             // (N, OC)
                    const T* inp,       // (N, C)
                    const T* weight,    // (OC, C)
                    const T* bias,      // (OC) or nullptr
                    int64_t N, int64_t C, int64_t OC);

// Up to this many rows are multiplied as dot products against the weight's contiguous rows (decoding one
// token): sgemm with one row of a transposed weight runs far below the memory bound.
inline constexpr int64_t kGemvRows = 4;

// out = inp · weightᵀ + bias with the weight stored as bf16 (N ≤ a few rows: decoding). Each bf16 value is
// widened to fp32 exactly; products and sums are fp32.
void matmul_forward_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC);
// The same with the weight stored as IEEE fp16 (GGUF's F16 tensors), widened exactly.
void matmul_forward_f16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                        int64_t OC);

// out = inp · weightᵀ + bias for Q4_0 or Q8_0 rows (kernels/quant.h) with `repacked` (quant.h's repack_q4_0x8 / repack_q8_0x8 of `weight`), any number
// of input rows (the input quantized to int8 blocks as in decoding): the whole groups of eight rows through the
// repacked kernel, the rest through the plain quantized gemv.
void matmul_forward_x8(QuantType type, float* out, const float* inp, const uint8_t* repacked, const void* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC);

// Decoding's per-row kernels for any number of rows: row n's outputs are those of a call with row n alone, bit for
// bit (each output is one dot product of the row and a weight row, summed the same way whatever N is). A server's
// row-invariant step multiplies its decoding rows with these (the bf16, fp16 and repacked kernels above are
// per-row already).
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC);
// With the weight's rows stored as `type` blocks (kernels/quant.h): each input row quantized to int8 blocks, as
// llama.cpp does, and integer dot products (the K types unpack each weight block once for four input rows), for
// decoding and for prompts up to the length where dequantizing the blocks for a GEMM pays (nn/layers.cpp).
void matmul_forward_quant_rows(QuantType type, float* out, const float* inp, const void* weight, const float* bias,
                               int64_t N, int64_t C, int64_t OC);

// Mixed precision (003 §13.2): the same products with 16-bit operands (gemm_half), fp32 sums and outputs.
// out = inp · weightᵀ + bias, with inp and weight rounded to `type` by the caller.
void matmul_forward_half(Half type, float* out, const uint16_t* inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC);
// dinp += dout16 · weight;  dweight += dout16ᵀ · inp;  dbias += Σ_n dout[n] (from the fp32 dout).
void matmul_backward_half(Half type, float* dinp, float* dweight, float* dbias, const float* dout,
                          const uint16_t* dout16, const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                          int64_t OC);

// dinp += dout · weight;  dweight += doutᵀ · inp;  dbias += Σ_n dout[n]
// Any of dinp, dweight, dbias may be nullptr when that gradient is not wanted.
template <typename T>
void matmul_backward(T* dinp,           // (N, C)
                     T* dweight,        // (OC, C)
                     T* dbias,          // (OC)
                     const T* dout,     // (N, OC)
                     const T* inp,      // (N, C)
                     const T* weight,   // (OC, C)
                     int64_t N, int64_t C, int64_t OC);

// out[n] = table[ids[n]]: the embedding is a lookup, i.e. one-hot(ids) · table (000 §8.2).
template <typename T>
void embedding_forward(T* out,            // (N, C)
                       const int32_t* ids,  // (N), each in [0, V)
                       const T* table,    // (V, C)
                       int64_t N, int64_t C);

// dtable[ids[n]] += dout[n]: the transpose of the lookup is a scatter-add. Rows that repeat an id
// accumulate; threads split the channels, so the sum order is fixed and results are reproducible.
template <typename T>
void embedding_backward(T* dtable,           // (V, C)
                        const T* dout,       // (N, C)
                        const int32_t* ids,  // (N)
                        int64_t N, int64_t C);

}  // namespace attend::kernels

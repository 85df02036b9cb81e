// The kernels compiled once per instruction set (src/kernels/isa/), as a table of function pointers: one
// table per set, and the one for the active set (cpu.h) is what the public kernels call. The public
// declarations (matmul.h, attention.h, convert.h, optimizer.h, elementwise.h) are unchanged for callers.
#pragma once

#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/optimizer.h"
#include "kernels/quant.h"

#include <cstdint>

namespace attend::kernels {

// out (N, OC) = inp (N, C) · weightᵀ + bias, weight (OC, C) stored as W; N is a few rows (decoding).
template <typename W>
using GemvFn = void(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC);
// The same with the weight's rows as `type` blocks (kernels/quant.h), the input quantized to int8 blocks.
using GemvQuantFn = void(QuantType type, float* out, const float* inp, const void* weight, const float* bias, int64_t N,
                         int64_t C, int64_t OC);
// Q4_0 (Q8_0) rows repacked eight at a time (quant.h, repack_q4_0x8, repack_q8_0x8): out for the first
// OC / 8 · 8 channels.
using GemvQ4x8Fn = void(float* out, const float* inp, const uint8_t* repacked, const float* bias, int64_t N, int64_t C,
                        int64_t OC);
template <typename KV>
using DecodeAttentionFn = void(float* out, const float* q, const KV* k, const KV* v, const float* k_scales,
                               const float* v_scales, const AttentionParams<float>& p, float* workspace);
using ToHalfFn = void(uint16_t* out, const float* inp, int64_t n);
using FromHalfFn = void(float* out, const uint16_t* inp, int64_t n);
using SgdFn = void(float* param, const float* grad, int64_t n, float lr, float weight_decay);
using MomentumFn = void(float* param, float* velocity, const float* grad, int64_t n, float lr, float beta, float gain,
                        float weight_decay);
using AdamFn = void(float* param, float* m, float* v, const float* grad, int64_t n, const AdamStep& step);
using FillFn = void(float* out, int64_t n, float value);
using ScaleFn = void(float* x, int64_t n, float factor);
using SumSquaresFn = double(const float* x, int64_t n);
using ExpWeightsFn = double(double* w, const float* z, int64_t n, float top, double inv_t);

struct KernelTable {
  Isa isa;
  GemvFn<float>* gemv_f32;
  GemvFn<uint16_t>* gemv_bf16;
  GemvFn<uint16_t>* gemv_f16;
  GemvQuantFn* gemv_quant;
  GemvQ4x8Fn* gemv_q4_0x8;
  GemvQ4x8Fn* gemv_q8_0x8;
  DecodeAttentionFn<float>* decode_attention_f32;
  DecodeAttentionFn<uint16_t>* decode_attention_f16;
  DecodeAttentionFn<int8_t>* decode_attention_i8;
  ToHalfFn* float_to_half;
  FromHalfFn* half_to_float;
  ToHalfFn* float_to_bf16;
  FromHalfFn* bf16_to_float;
  SgdFn* sgd_update;
  MomentumFn* momentum_update;
  AdamFn* adam_update;
  FillFn* fill;
  ScaleFn* scale;
  SumSquaresFn* sum_squares;
  ExpWeightsFn* exp_weights;
};

// Each set's table, defined in src/kernels/isa/table.cpp compiled for that set. Only call the table of a
// set the CPU supports.
namespace generic { const KernelTable& kernel_table(); }
namespace avx2 { const KernelTable& kernel_table(); }
namespace avx512 { const KernelTable& kernel_table(); }
namespace avx512vnni { const KernelTable& kernel_table(); }

const KernelTable& kernel_table(Isa isa);
// The table of active_isa().
const KernelTable& active_kernels();

}  // namespace attend::kernels

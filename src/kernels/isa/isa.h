// Included first by every source in src/kernels/isa/, which CMake compiles once per instruction set with
// ATTEND_ISA set to generic, avx2, avx512 or avx512vnni and that set's -march. Declares the set's kernels, in namespace
// attend::kernels::ATTEND_ISA, with the signatures of kernel_table.h.
//
// Every inline function these sources use from a shared header must be in an ISA-specific namespace
// too (kernels/isa_namespace.h): otherwise the linker may keep the AVX-512 copy of an inline function
// for every caller, and a CPU without AVX-512 would fault. A CTest test checks the objects' symbols.
#pragma once

#if !defined(ATTEND_ISA)
#error "src/kernels/isa/ sources are compiled once per instruction set with ATTEND_ISA defined (CMakeLists.txt)"
#endif

#include "kernels/kernel_table.h"

namespace attend::kernels::ATTEND_ISA {

GemvFn<float> gemv_f32;
GemvFn<uint16_t> gemv_bf16;
GemvFn<uint16_t> gemv_f16;
GemvQuantFn gemv_quant;
GemvQ4x8Fn gemv_q4_0x8;
GemvQ4x8Fn gemv_q8_0x8;
DecodeAttentionFn<float> decode_attention_f32;
DecodeAttentionFn<uint16_t> decode_attention_f16;
DecodeAttentionFn<int8_t> decode_attention_i8;
ToHalfFn float_to_half;
FromHalfFn half_to_float;
ToHalfFn float_to_bf16;
FromHalfFn bf16_to_float;
SgdFn sgd_update;
MomentumFn momentum_update;
AdamFn adam_update;
FillFn fill;
ScaleFn scale;
SumSquaresFn sum_squares;
ExpWeightsFn exp_weights;

}  // namespace attend::kernels::ATTEND_ISA

// This instruction set's kernel table (kernel_table.h).
#include "kernels/isa/isa.h"

namespace attend::kernels::ATTEND_ISA {

const KernelTable& kernel_table() {
  static constexpr KernelTable table = {
      .isa = Isa::ATTEND_ISA_ENUM,
      .gemv_f32 = gemv_f32,
      .gemv_bf16 = gemv_bf16,
      .gemv_f16 = gemv_f16,
      .gemv_quant = gemv_quant,
      .gemv_q4_0x8 = gemv_q4_0x8,
      .gemv_q8_0x8 = gemv_q8_0x8,
      .decode_attention_f32 = decode_attention_f32,
      .decode_attention_f16 = decode_attention_f16,
      .decode_attention_i8 = decode_attention_i8,
      .float_to_half = float_to_half,
      .half_to_float = half_to_float,
      .float_to_bf16 = float_to_bf16,
      .bf16_to_float = bf16_to_float,
      .sgd_update = sgd_update,
      .momentum_update = momentum_update,
      .adam_update = adam_update,
      .fill = fill,
      .scale = scale,
      .sum_squares = sum_squares,
      .exp_weights = exp_weights,
  };
  return table;
}

}  // namespace attend::kernels::ATTEND_ISA

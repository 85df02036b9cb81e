// The public kernels that have one version per instruction set (src/kernels/isa/): each call goes to the
// table of the set chosen at run time (cpu.h).
#include "kernels/attention.h"
#include "kernels/attention_scores.h"
#include "kernels/convert.h"
#include "kernels/decode_attention_layout.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/optimizer.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"

#include <type_traits>
#include <vector>

namespace attend::kernels {

const KernelTable& kernel_table(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return avx512vnni::kernel_table();
    case Isa::Avx512: return avx512::kernel_table();
    case Isa::Avx2: return avx2::kernel_table();
    case Isa::Generic: break;
  }
  return generic::kernel_table();
}

const KernelTable& active_kernels() { return kernel_table(active_isa()); }

void matmul_forward_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  active_kernels().gemv_bf16(out, inp, weight, bias, N, C, OC);
}

void matmul_forward_f16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                        int64_t OC) {
  active_kernels().gemv_f16(out, inp, weight, bias, N, C, OC);
}

void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  active_kernels().gemv_f32(out, inp, weight, bias, N, C, OC);
}

void matmul_forward_quant_rows(QuantType type, float* out, const float* inp, const void* weight, const float* bias,
                               int64_t N, int64_t C, int64_t OC) {
  active_kernels().gemv_quant(type, out, inp, weight, bias, N, C, OC);
}

void matmul_forward_x8(QuantType type, float* out, const float* inp, const uint8_t* repacked, const void* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC) {
  (type == QuantType::Q4_0 ? active_kernels().gemv_q4_0x8 : active_kernels().gemv_q8_0x8)(out, inp, repacked, bias, N, C, OC);
  const int64_t done = OC / 8 * 8, rest = OC - done;
  if (rest == 0) return;
  thread_local std::vector<float> tail;
  tail.resize(static_cast<size_t>(N * rest));
  const auto* rows = static_cast<const uint8_t*>(weight) + done * quant_row_bytes(type, C);
  active_kernels().gemv_quant(type, tail.data(), inp, rows, bias != nullptr ? bias + done : nullptr, N, C, rest);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < rest; ++r) out[n * OC + done + r] = tail[n * rest + r];
}

int64_t decode_attention_workspace_size(const AttentionParams<float>& p, int threads) {
  using namespace decode_layout;
  return threads * scores_size(p) + kLineFloats + p.B * blocks(p) * p.n_heads * partial_size(p) +
         detail::t5_bucket_table_size(p);  // int32 buckets fit in floats
}

template <typename KV>
void decode_attention_forward(float* out, const float* q, const KV* k, const KV* v, const float* k_scales,
                              const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  const KernelTable& table = active_kernels();
  if constexpr (std::is_same_v<KV, float>) table.decode_attention_f32(out, q, k, v, k_scales, v_scales, p, workspace);
  if constexpr (std::is_same_v<KV, uint16_t>) table.decode_attention_f16(out, q, k, v, k_scales, v_scales, p, workspace);
  if constexpr (std::is_same_v<KV, int8_t>) table.decode_attention_i8(out, q, k, v, k_scales, v_scales, p, workspace);
}

template void decode_attention_forward<float>(float*, const float*, const float*, const float*, const float*,
                                              const float*, const AttentionParams<float>&, float*);
template void decode_attention_forward<uint16_t>(float*, const float*, const uint16_t*, const uint16_t*, const float*,
                                                 const float*, const AttentionParams<float>&, float*);
template void decode_attention_forward<int8_t>(float*, const float*, const int8_t*, const int8_t*, const float*,
                                               const float*, const AttentionParams<float>&, float*);

void float_to_half(uint16_t* out, const float* inp, int64_t n) { active_kernels().float_to_half(out, inp, n); }
void half_to_float(float* out, const uint16_t* inp, int64_t n) { active_kernels().half_to_float(out, inp, n); }
void float_to_bf16(uint16_t* out, const float* inp, int64_t n) { active_kernels().float_to_bf16(out, inp, n); }
void bf16_to_float(float* out, const uint16_t* inp, int64_t n) { active_kernels().bf16_to_float(out, inp, n); }

void sgd_update(float* param, const float* grad, int64_t n, float lr, float weight_decay) {
  active_kernels().sgd_update(param, grad, n, lr, weight_decay);
}

void momentum_update(float* param, float* velocity, const float* grad, int64_t n, float lr, float beta, float gain,
                     float weight_decay) {
  active_kernels().momentum_update(param, velocity, grad, n, lr, beta, gain, weight_decay);
}

void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamStep& step) {
  active_kernels().adam_update(param, m, v, grad, n, step);
}

void fill(float* out, int64_t n, float value) { active_kernels().fill(out, n, value); }
void scale(float* x, int64_t n, float factor) { active_kernels().scale(x, n, factor); }
double sum_squares(const float* x, int64_t n) { return active_kernels().sum_squares(x, n); }

double exp_weights(double* w, const float* z, int64_t n, float top, double inv_t) {
  return active_kernels().exp_weights(w, z, n, top, inv_t);
}

}  // namespace attend::kernels

#include "kernels/matmul.h"

#include "kernels/gemm.h"
#include "kernels/kernel_table.h"
#include "kernels/parallel.h"

#include <cstring>
#include <type_traits>

namespace attend::kernels {

namespace {

void add_bias_rows(float* out, const float* bias, int64_t N, int64_t OC) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(float));
  });
}

template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t OC) {
  // Each thread owns a block of output channels and walks the rows: no races, fixed order.
  parallel_for(OC, 64, [&](int64_t o0, int64_t o1) {
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC;
      for (int64_t o = o0; o < o1; ++o) dbias[o] += row[o];
    }
  });
}

}  // namespace

void matmul_forward_half(Half type, float* out, const uint16_t* inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC) {
  if (bias != nullptr) add_bias_rows(out, bias, N, OC);
  gemm_half(type, false, true, N, OC, C, inp, C, weight, C, bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void matmul_backward_half(Half type, float* dinp, float* dweight, float* dbias, const float* dout,
                          const uint16_t* dout16, const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                          int64_t OC) {
  if (dinp != nullptr) gemm_half(type, false, false, N, C, OC, dout16, OC, weight, C, 1.0f, dinp, C);
  if (dweight != nullptr) gemm_half(type, true, false, OC, C, N, dout16, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (N <= kGemvRows) return active_kernels().gemv_f32(out, inp, weight, bias, N, C, OC);
  }
  // Start from the bias rows and let the GEMM accumulate onto them (beta = 1): one pass over `out`.
  if (bias != nullptr) {
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(T));
    });
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t C, int64_t OC) {
  if (dinp != nullptr) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
  if (dweight != nullptr) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * C, table + int64_t{ids[n]} * C, C * sizeof(T));
  });
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C) {
  parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dtable + int64_t{ids[n]} * C;
      const T* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                           \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);           \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);  \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t);                     \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

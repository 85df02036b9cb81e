#include "kernels/dropout.h"

#include "kernels/parallel.h"


namespace attend::kernels {
namespace {

constexpr int64_t kGrain = 1 << 14;

}  // namespace

template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t offset) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    T scales[256];
    for (int64_t c0 = i0; c0 < i1; c0 += 256) {
      const int64_t len = i1 - c0 < 256 ? i1 - c0 : 256;
      dropout_keep_scales(scales, len, offset + c0, p, seed);
      for (int64_t c = 0; c < len; ++c) out[c0 + c] = inp[c0 + c] * scales[c];
    }
  });
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, float p, uint64_t seed, uint64_t offset) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    T scales[256];
    for (int64_t c0 = i0; c0 < i1; c0 += 256) {
      const int64_t len = i1 - c0 < 256 ? i1 - c0 : 256;
      dropout_keep_scales(scales, len, offset + c0, p, seed);
      for (int64_t c = 0; c < len; ++c) dinp[c0 + c] += dout[c0 + c] * scales[c];
    }
  });
}

template <typename T>
void residual_forward(T* out, const T* h, const T* f, int64_t n, T alpha) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = h[i] + alpha * f[i];
  });
}

template <typename T>
void residual_backward(T* dh, T* df, const T* dout, int64_t n, T alpha) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      dh[i] += dout[i];
      df[i] += alpha * dout[i];
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                         \
  template void dropout_forward<T>(T*, const T*, int64_t, float, uint64_t, uint64_t); \
  template void dropout_backward<T>(T*, const T*, int64_t, float, uint64_t, uint64_t); \
  template void residual_forward<T>(T*, const T*, const T*, int64_t, T);              \
  template void residual_backward<T>(T*, T*, const T*, int64_t, T);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

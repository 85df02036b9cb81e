#include "kernels/cross_entropy.h"

#include "kernels/parallel.h"
#include "kernels/softmax.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>

namespace attend::kernels {

template <typename T>
int64_t cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                              T label_smoothing, int32_t ignore_index) {
  logsumexp_forward(lse, logits, N, V);
  const double alpha = label_smoothing;
  int64_t counted = 0;
  for (int64_t n = 0; n < N; ++n) counted += targets[n] != ignore_index;
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (targets[n] == ignore_index) {
        losses[n] = T(0);
        continue;
      }
      const T* z = logits + n * V;
      double loss = lse[n] - (1.0 - alpha) * z[targets[n]];
      if (alpha != 0.0) {
        loss -= alpha / static_cast<double>(V) * vec::sum<T>(V, [&](int64_t j) { return z[j]; });
      }
      losses[n] = static_cast<T>(loss);
    }
  });
  return counted;
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* dlosses, const T* logits, const T* lse, const int32_t* targets,
                            int64_t N, int64_t V, T label_smoothing, int32_t ignore_index) {
  const double alpha = label_smoothing;
  const double uniform = alpha / static_cast<double>(V);
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (targets[n] == ignore_index) continue;
      const T* z = logits + n * V;
      T* dz = dlogits + n * V;
      const T g = dlosses[n], row_lse = lse[n], u = static_cast<T>(uniform);
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dz[j] += g * (vec::exp(z[j] - row_lse) - u);
      dz[targets[n]] -= static_cast<T>(g * (1.0 - alpha));
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                                 \
  template int64_t cross_entropy_forward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, T, int32_t); \
  template void cross_entropy_backward<T>(T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t, T, \
                                          int32_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

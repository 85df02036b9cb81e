#include "kernels/softmax.h"

#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attend::kernels {
namespace {

// Rows per parallel chunk: enough work per thread to pay for waking it.

template <typename T>
T row_max(const T* z, int64_t V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = z[j] > m ? z[j] : m;
  return m;
}

// Σ_j exp(z_j − c), summed in double. The exponentials are computed in T: vectorized for float.
template <typename T>
double sum_exp(const T* z, T c, int64_t V) {
  return vec::sum<T>(V, [&](int64_t j) { return vec::exp(z[j] - c); });
}

// log Σ_j exp(z_j) = m + log Σ_j exp(z_j − m) with m the row maximum; −∞ (the log of an empty sum) when
// every entry is −∞.
template <typename T>
T row_logsumexp(const T* z, int64_t V) {
  const T m = row_max(z, V);
  if (m == -std::numeric_limits<T>::infinity()) return m;
  return static_cast<T>(m + std::log(sum_exp(z, m, V)));
}

}  // namespace

template <typename T>
void softmax_forward(T* out, const T* inp, int64_t N, int64_t V, T temperature) {
  const T inv_t = T(1) / temperature;
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* z = inp + n * V;
      T* p = out + n * V;
      const T m = row_max(z, V);
      if (m == -std::numeric_limits<T>::infinity()) {  // every entry masked: no distribution to form
        std::fill_n(p, V, T(0));
        continue;
      }
      const double sum = vec::sum<T>(V, [&](int64_t j) { return p[j] = vec::exp((z[j] - m) * inv_t); });
      const T inv_sum = static_cast<T>(1.0 / sum);
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) p[j] *= inv_sum;
    }
  });
}

template <typename T>
void softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t V, T temperature) {
  const T inv_t = T(1) / temperature;
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* dp = dout + n * V;
      const T* p = out + n * V;
      T* dz = dinp + n * V;
      const T dot_t = static_cast<T>(vec::sum<T>(V, [&](int64_t j) { return dp[j] * p[j]; }));
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dz[j] += inv_t * p[j] * (dp[j] - dot_t);
    }
  });
}

template <typename T>
void logsumexp_forward(T* out, const T* inp, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) out[n] = row_logsumexp(inp + n * V, V);
  });
}

template <typename T>
void logsumexp_backward(T* dinp, const T* dout, const T* inp, const T* out, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (out[n] == -std::numeric_limits<T>::infinity()) continue;
      const T* z = inp + n * V;
      T* dz = dinp + n * V;
      const T g = dout[n], lse = out[n];
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dz[j] += g * vec::exp(z[j] - lse);
    }
  });
}

template <typename T>
void log_softmax_forward(T* out, const T* inp, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* z = inp + n * V;
      const T lse = row_logsumexp(z, V);
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) out[n * V + j] = z[j] - lse;
    }
  });
}

template <typename T>
void log_softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* dy = dout + n * V;
      const T* y = out + n * V;
      const T total_t = static_cast<T>(vec::sum<T>(V, [&](int64_t j) { return dy[j]; }));
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dinp[n * V + j] += dy[j] - vec::exp(y[j]) * total_t;
    }
  });
}

template <typename T>
void softmax_jacobian(T* jacobian, const T* p, int64_t V) {
  for (int64_t i = 0; i < V; ++i)
    for (int64_t j = 0; j < V; ++j) jacobian[i * V + j] = p[i] * ((i == j ? T(1) : T(0)) - p[j]);
}

#define ATTEND_INSTANTIATE(T)                                                                    \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t, T);                           \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t, T);                \
  template void log_softmax_forward<T>(T*, const T*, int64_t, int64_t);                          \
  template void log_softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);               \
  template void logsumexp_forward<T>(T*, const T*, int64_t, int64_t);                            \
  template void logsumexp_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t);       \
  template void softmax_jacobian<T>(T*, const T*, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

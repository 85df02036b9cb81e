#include "kernels/softmax.h"

#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attend::kernels {
namespace {

// Rows per parallel chunk: enough work per thread to pay for waking it.
int64_t row_grain(int64_t V) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(V, 1)); }

template <typename T>
T row_max(const T* z, int64_t V) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < V; ++j) m = std::max(m, z[j]);
  return m;
}

}  // namespace

template <typename T>
void softmax_forward(T* out, const T* inp, int64_t N, int64_t V, T temperature) {
  const double inv_t = 1.0 / static_cast<double>(temperature);
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* z = inp + n * V;
      T* p = out + n * V;
      T m = row_max(z, V);
      if (m == -std::numeric_limits<T>::infinity()) {  // every entry masked: no distribution to form
        std::fill_n(p, V, T(0));
        continue;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        double e = std::exp((static_cast<double>(z[j]) - m) * inv_t);
        p[j] = static_cast<T>(e);
        sum += e;
      }
      const double inv_sum = 1.0 / sum;
      for (int64_t j = 0; j < V; ++j) p[j] = static_cast<T>(p[j] * inv_sum);
    }
  });
}

template <typename T>
void softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t V, T temperature) {
  const double inv_t = 1.0 / static_cast<double>(temperature);
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* dp = dout + n * V;
      const T* p = out + n * V;
      T* dz = dinp + n * V;
      double dot = 0.0;
      for (int64_t j = 0; j < V; ++j) dot += static_cast<double>(dp[j]) * p[j];
      for (int64_t j = 0; j < V; ++j) dz[j] += static_cast<T>(inv_t * p[j] * (dp[j] - dot));
    }
  });
}

template <typename T>
void logsumexp_forward(T* out, const T* inp, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* z = inp + n * V;
      T m = row_max(z, V);
      if (m == -std::numeric_limits<T>::infinity()) {
        out[n] = m;  // log of an empty sum
        continue;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j]) - m);
      out[n] = static_cast<T>(m + std::log(sum));
    }
  });
}

template <typename T>
void logsumexp_backward(T* dinp, const T* dout, const T* inp, const T* out, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (out[n] == -std::numeric_limits<T>::infinity()) continue;
      const T* z = inp + n * V;
      T* dz = dinp + n * V;
      for (int64_t j = 0; j < V; ++j)
        dz[j] += static_cast<T>(dout[n] * std::exp(static_cast<double>(z[j]) - out[n]));
    }
  });
}

template <typename T>
void log_softmax_forward(T* out, const T* inp, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      T lse;
      logsumexp_forward(&lse, inp + n * V, 1, V);
      for (int64_t j = 0; j < V; ++j) out[n * V + j] = inp[n * V + j] - lse;
    }
  });
}

template <typename T>
void log_softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* dy = dout + n * V;
      const T* y = out + n * V;
      double total = 0.0;
      for (int64_t j = 0; j < V; ++j) total += dy[j];
      for (int64_t j = 0; j < V; ++j) dinp[n * V + j] += static_cast<T>(dy[j] - std::exp(double{y[j]}) * total);
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

#include "kernels/norm.h"

#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>

namespace attend::kernels {
namespace {

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

// Column-blocked reduction over rows for the parameter gradients: each thread owns a block of
// channels, so there are no races and the summation order never depends on the thread count.
// `term(n, c)` gives row n's contribution to channel c.
template <typename T, typename Term>
void accumulate_columns(T* grad, int64_t N, int64_t C, Term&& term) {
  parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = c0; c < c1; ++c) grad[c] += term(n, c);
  });
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, T eps) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) sum += x[c];
      const double mu = sum / C;
      double var = 0.0;  // two-pass variance: no cancellation when |μ| ≫ σ
      for (int64_t c = 0; c < C; ++c) var += (x[c] - mu) * (x[c] - mu);
      var /= C;
      const double r = 1.0 / std::sqrt(var + eps);
      T* y = out + n * C;
      for (int64_t c = 0; c < C; ++c) {
        T xhat = static_cast<T>((x[c] - mu) * r);
        y[c] = xhat * weight[c] + (bias != nullptr ? bias[c] : T(0));
      }
      mean[n] = static_cast<T>(mu);
      rstd[n] = static_cast<T>(r);
    }
  });
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      const double mu = mean[n], r = rstd[n];
      double mean_g = 0.0, mean_gx = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        double g = double{dy[c]} * weight[c];
        mean_g += g;
        mean_gx += g * (x[c] - mu) * r;
      }
      mean_g /= C;
      mean_gx /= C;
      T* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        double xhat = (x[c] - mu) * r;
        double g = double{dy[c]} * weight[c];
        dx[c] += static_cast<T>(r * (g - mean_g - xhat * mean_gx));
      }
    }
  });
  accumulate_columns(dweight, N, C, [&](int64_t n, int64_t c) {
    return static_cast<T>(dout[n * C + c] * ((inp[n * C + c] - mean[n]) * rstd[n]));
  });
  if (dbias != nullptr) accumulate_columns(dbias, N, C, [&](int64_t n, int64_t c) { return dout[n * C + c]; });
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      double sumsq = 0.0;
      for (int64_t c = 0; c < C; ++c) sumsq += double{x[c]} * x[c];
      const double r = 1.0 / std::sqrt(sumsq / C + eps);
      T* y = out + n * C;
      for (int64_t c = 0; c < C; ++c) y[c] = static_cast<T>(x[c] * r) * weight[c];
      rstd[n] = static_cast<T>(r);
    }
  });
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      const double r = rstd[n];
      double mean_gx = 0.0;
      for (int64_t c = 0; c < C; ++c) mean_gx += double{dy[c]} * weight[c] * x[c] * r;
      mean_gx /= C;
      T* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) dx[c] += static_cast<T>(r * (double{dy[c]} * weight[c] - x[c] * r * mean_gx));
    }
  });
  accumulate_columns(dweight, N, C,
                     [&](int64_t n, int64_t c) { return static_cast<T>(dout[n * C + c] * (inp[n * C + c] * rstd[n])); });
}

#define ATTEND_INSTANTIATE(T)                                                                                  \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);           \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,   \
                                      int64_t);                                                                \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);                           \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

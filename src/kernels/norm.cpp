#include "kernels/norm.h"

#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>

namespace attend::kernels {
namespace {


// Parameter gradients reduce over rows. Each thread owns a block of channels and walks every row, so
// there are no races and the summation order never depends on the thread count. `update(n, c0, c1)`
// adds row n's contribution to channels [c0, c1).
template <typename Update>
void reduce_rows_by_channel_block(int64_t N, int64_t C, Update&& update) {
  parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) update(n, c0, c1);
  });
}

// y = (x − μ)·r·γ + β for one row (β optional). Out of line, as the backward's rows below: inlined into the
// loop over rows these two still vectorized, but GCC's report named neither loop's lines, which
// scripts/check_vectorized.py reads.
template <typename T>
[[gnu::noinline]] void normalize_row(T* y, const T* x, const T* weight, const T* bias, T m, T r, int64_t C) {
  if (bias != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c];
  }
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, T eps) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      const T m = static_cast<T>(vec::sum<T>(C, [&](int64_t c) { return x[c]; }) / C);
      // Two-pass variance: no cancellation when |μ| ≫ σ.
      const double var = vec::sum<T>(C, [&](int64_t c) { return (x[c] - m) * (x[c] - m); }) / C;
      const T r = static_cast<T>(1.0 / std::sqrt(var + eps));
      normalize_row(out + n * C, x, weight, bias, m, r, C);
      mean[n] = m;
      rstd[n] = r;
    }
  });
}

// The per-row and per-channel-block loops of the backward passes, as functions of plain values.
// They are kept out of line on purpose: GCC 12 stops vectorizing an `omp simd` loop once it is inlined
// into the loop over rows ("latch block not empty"), and one call per row costs nothing.
namespace {

// dx += r·(g − mean(g) − x̂·mean(g ⊙ x̂)) for one row, g = dy ⊙ γ, x̂ = (x − μ)·r (μ = 0 for RMSNorm).
template <typename T>
[[gnu::noinline]] void norm_backward_row(T* dx, const T* dy, const T* x, const T* weight, T mu, T r, bool centre, int64_t C) {
  const T mean_g = centre ? static_cast<T>(vec::sum<T>(C, [&](int64_t c) { return dy[c] * weight[c]; }) / C) : T(0);
  const T mean_gx =
      static_cast<T>(vec::sum<T>(C, [&](int64_t c) { return dy[c] * weight[c] * ((x[c] - mu) * r); }) / C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) dx[c] += r * (dy[c] * weight[c] - mean_g - (x[c] - mu) * r * mean_gx);
}

// dγ += dy ⊙ x̂ and dβ += dy (when dbias is given) over channels [c0, c1) of one row.
template <typename T>
[[gnu::noinline]] void norm_param_grads_row(T* dweight, T* dbias, const T* dy, const T* x, T mu, T r, int64_t c0, int64_t c1) {
  if (dweight != nullptr) {  // nullptr: a frozen gain
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) dweight[c] += dy[c] * ((x[c] - mu) * r);
  }
  if (dbias != nullptr) {
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) dbias[c] += dy[c];
  }
}

}  // namespace

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      norm_backward_row(dinp + n * C, dout + n * C, inp + n * C, weight, mean[n], rstd[n], true, C);
  });
  if (dweight == nullptr && dbias == nullptr) return;  // frozen
  reduce_rows_by_channel_block(N, C, [&](int64_t n, int64_t c0, int64_t c1) {
    norm_param_grads_row(dweight, dbias, dout + n * C, inp + n * C, mean[n], rstd[n], c0, c1);
  });
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = inp + n * C;
      const double sumsq = vec::sum<T>(C, [&](int64_t c) { return x[c] * x[c]; });
      const T r = static_cast<T>(1.0 / std::sqrt(sumsq / C + eps));
      T* y = out + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = x[c] * r * weight[c];
      rstd[n] = r;
    }
  });
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C) {
  parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      norm_backward_row(dinp + n * C, dout + n * C, inp + n * C, weight, T(0), rstd[n], false, C);
  });
  if (dweight == nullptr) return;  // frozen
  reduce_rows_by_channel_block(N, C, [&](int64_t n, int64_t c0, int64_t c1) {
    norm_param_grads_row(dweight, static_cast<T*>(nullptr), dout + n * C, inp + n * C, T(0), rstd[n], c0, c1);
  });
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

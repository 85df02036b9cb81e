#include "kernels/similarity.h"

#include "kernels/gemm.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>

namespace attend::kernels {
namespace {

struct Moments {
  double dot = 0.0, aa = 0.0, bb = 0.0;
};

template <typename T>
Moments moments(const T* a, const T* b, int64_t C) {
  Moments m;
  for (int64_t c = 0; c < C; ++c) {
    m.dot += double{a[c]} * b[c];
    m.aa += double{a[c]} * a[c];
    m.bb += double{b[c]} * b[c];
  }
  return m;
}

}  // namespace

template <typename T>
void cosine_similarity_forward(T* out, const T* a, const T* b, int64_t N, int64_t C, T eps) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      Moments m = moments(a + n * C, b + n * C, C);
      out[n] = static_cast<T>(m.dot / std::max(std::sqrt(m.aa * m.bb), double{eps}));
    }
  });
}

template <typename T>
void cosine_similarity_backward(T* da, T* db, const T* dout, const T* a, const T* b, int64_t N, int64_t C, T eps) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = a + n * C;
      const T* y = b + n * C;
      Moments m = moments(x, y, C);
      const double norm = std::sqrt(m.aa * m.bb);
      if (norm <= eps) {  // the clamped denominator is a constant: s = a·b/eps
        for (int64_t c = 0; c < C; ++c) {
          da[n * C + c] += static_cast<T>(dout[n] * y[c] / eps);
          db[n * C + c] += static_cast<T>(dout[n] * x[c] / eps);
        }
        continue;
      }
      const double s = m.dot / norm;
      for (int64_t c = 0; c < C; ++c) {
        da[n * C + c] += static_cast<T>(dout[n] * (y[c] / norm - s * x[c] / m.aa));
        db[n * C + c] += static_cast<T>(dout[n] * (x[c] / norm - s * y[c] / m.bb));
      }
    }
  });
}

template <typename T>
void euclidean_distance_forward(T* out, const T* a, const T* b, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        double d = double{a[n * C + c]} - b[n * C + c];
        sum += d * d;
      }
      out[n] = static_cast<T>(std::sqrt(sum));
    }
  });
}

template <typename T>
void euclidean_distance_backward(T* da, T* db, const T* dout, const T* a, const T* b, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        double d = double{a[n * C + c]} - b[n * C + c];
        sum += d * d;
      }
      if (sum == 0.0) continue;
      const double scale = dout[n] / std::sqrt(sum);
      for (int64_t c = 0; c < C; ++c) {
        double g = scale * (double{a[n * C + c]} - b[n * C + c]);
        da[n * C + c] += static_cast<T>(g);
        db[n * C + c] -= static_cast<T>(g);
      }
    }
  });
}

template <typename T>
void mips_topk(int32_t* indices, T* scores, T* scratch, const T* queries, const T* keys, int64_t M, int64_t N,
               int64_t C, int64_t k) {
  gemm<T>(false, true, M, N, C, T(1), queries, C, keys, C, T(0), scratch, N);
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const T* row = scratch + m * N;
      int32_t* idx = indices + m * k;
      // "a ranks before b": higher score, then lower index.
      auto before = [row](int32_t x, int32_t y) { return row[x] > row[y] || (row[x] == row[y] && x < y); };
      // A heap of the best k seen so far, whose top is the worst of them.
      int64_t size = 0;
      for (int32_t j = 0; j < N; ++j) {
        if (size < k) {
          idx[size++] = j;
          std::push_heap(idx, idx + size, before);
        } else if (before(j, idx[0])) {
          std::pop_heap(idx, idx + size, before);
          idx[size - 1] = j;
          std::push_heap(idx, idx + size, before);
        }
      }
      std::sort_heap(idx, idx + size, before);
      for (int64_t i = 0; i < size; ++i) scores[m * k + i] = row[idx[i]];
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                                 \
  template void cosine_similarity_forward<T>(T*, const T*, const T*, int64_t, int64_t, T);                    \
  template void cosine_similarity_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);     \
  template void euclidean_distance_forward<T>(T*, const T*, const T*, int64_t, int64_t);                      \
  template void euclidean_distance_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t);       \
  template void mips_topk<T>(int32_t*, T*, T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

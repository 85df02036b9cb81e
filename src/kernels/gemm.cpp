#include "kernels/gemm.h"

#include "kernels/parallel.h"

#include <oneapi/dnnl/dnnl.h>

#include <cassert>
#include <string>

namespace attend::kernels {

template <typename T>
void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                    int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t i = m0; i < m1; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          double a = trans_a ? A[k * lda + i] : A[i * lda + k];
          double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
          sum += a * b;
        }
        T* c = &C[i * ldc + j];
        *c = static_cast<T>(alpha * sum + (beta == T(0) ? T(0) : beta * *c));
      }
    }
  });
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // oneDNN rejects K == 0; the product is empty, so only the beta scaling remains
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  // With several threads and enough rows, each thread multiplies its own block of rows of C with a
  // single-threaded sgemm (oneDNN runs on one thread inside a parallel region). This keeps every thread
  // on a whole panel of B and measured 2-4% faster than oneDNN's own split on the FFN-down shape
  // (docs/BENCHMARKS.md). Small M (decoding one token) is left to oneDNN, which splits N instead.
  constexpr int64_t kMinRowsPerThread = 256;
  const int threads = num_threads();
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  if (threads > 1 && M >= kMinRowsPerThread * threads) {
    parallel_for(M, kMinRowsPerThread, [&](int64_t m0, int64_t m1) {
      const float* A_rows = trans_a ? A + m0 : A + m0 * lda;  // rows of op(A) are columns of A when transposed
      [[maybe_unused]] dnnl_status_t status =
          dnnl_sgemm(ta, tb, m1 - m0, N, K, alpha, A_rows, lda, B, ldb, beta, C + m0 * ldc, ldc);
      assert(status == dnnl_success);
    });
    return;
  }
  [[maybe_unused]] dnnl_status_t status = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  assert(status == dnnl_success);
}

const char* gemm_backend() {
  static const std::string name = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " sgemm (kernel chosen from the CPU at run time)";
  }();
  return name.c_str();
}

template void gemm_reference<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                    const float*, int64_t, float, float*, int64_t);
template void gemm_reference<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                     const double*, int64_t, double, double*, int64_t);

}  // namespace attend::kernels

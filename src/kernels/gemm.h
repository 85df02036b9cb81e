// General matrix multiply, row-major: C = alpha * op(A) * op(B) + beta * C,
// where op(A) is M×K, op(B) is K×N and C is M×N; op(X) = Xᵀ when trans_x is true.
//
// float goes to oneDNN's sgemm, which picks its AVX-512 / AVX2 / SSE kernel from the CPU at run time
// and ignores OPENBLAS_* settings (docs/ARCHITECTURE.md says why). double and the *_reference
// version are plain loops: the oracle in tests.
#pragma once

#include <cstdint>

namespace attend::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

template <typename T>
void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                    int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The name of the backend behind gemm<float>, for `attend info` and the benchmarks.
const char* gemm_backend();

}  // namespace attend::kernels

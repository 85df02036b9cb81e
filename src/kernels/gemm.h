// General matrix multiply, row-major: C = alpha * op(A) * op(B) + beta * C,
// where op(A) is M×K, op(B) is K×N and C is M×N; op(X) = Xᵀ when trans_x is true.
//
// float goes to oneDNN's sgemm, which picks its AVX-512 / AVX2 / SSE kernel from the CPU at run time
// and ignores OPENBLAS_* settings (docs/ARCHITECTURE.md says why). double and the *_reference
// version are plain loops: the oracle in tests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attend::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

template <typename T>
void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                    int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The 16-bit formats of mixed precision (003 §13.2): bfloat16 (fp32's exponent, 8 bits of mantissa) and IEEE
// half precision (5 exponent bits: overflows past 65504, hence loss scaling).
enum class Half { BF16, F16 };

// C = op(A)·op(B) + beta·C with A and B as 16-bit values (bits of `type`), products and sums in fp32, C fp32.
// BF16 runs oneDNN's matmul, which uses the AVX-512 BF16 dot-product instructions where the CPU has them
// (about twice sgemm's rate); on CPUs for which oneDNN has no bf16 matmul it widens A and B exactly to fp32
// and runs sgemm. F16 always widens: CPUs without AVX512-FP16 have no fp16 arithmetic, so this gives fp16's
// numbers (the operands' rounding, overflow and underflow), not speed.
void gemm_half(Half type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether oneDNN has a native bf16 matmul for this CPU (AVX-512 BF16, AMX; an emulated one does not count); without
// one, bf16 GEMMs widen to fp32.
bool bf16_kernel_available();

// Whether the bf16 matmul, where oneDNN has one, is faster than widening to fp32 for sgemm on this CPU, and so
// taken by default. Not on Intel's cores without AMX: their AVX-512 BF16 dot product (32 products, one port) does
// no more than two ports of 16-lane fp32 FMAs, and the operands' conversion comes on top (an Emerald Rapids guest:
// GPT-2-124M's bf16 prompts 1.5× faster through sgemm, Q8_0's 2.1-2.3× on the int8 kernels; docs/BENCHMARKS.md).
// Zen 4 and Zen 5, whose 512-bit FMAs are fewer or narrower, gain from it. ATTEND_BF16_GEMM=1 or 0 forces it.
bool bf16_kernel_preferred();

// Tests turn oneDNN's bf16 matmul off (and back on) to check the widening path that other CPUs take; it starts
// as bf16_kernel_preferred() says.
void set_bf16_kernel_enabled(bool enabled);
// Whether bf16 GEMMs run oneDNN's bf16 matmul now (available and turned on).
bool bf16_kernel_in_use();

// The bf16 matmul primitives kept (one per shape; past the capacity the least recently used goes), and how
// many were made since the program started (a shape made again after its eviction counts twice).
inline constexpr size_t kBf16MatmulCacheCapacity = 64;
struct Bf16MatmulCacheStats {
  size_t size = 0, made = 0;
};
Bf16MatmulCacheStats bf16_matmul_cache_stats();

// The name of the backend behind gemm<float>, for `attend info` and the benchmarks.
const char* gemm_backend();

}  // namespace attend::kernels

#include "kernels/gemm.h"

#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/lru_cache.h"
#include "kernels/parallel.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <cassert>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace attend::kernels {

namespace {

// oneDNN's matmul is a primitive made once per shape (it JIT-compiles a kernel for it); training multiplies
// the same few dozen shapes every step, so the primitives are kept here, one per shape and stride. Padded
// batches and prompts of every length bring new shapes without end, so the cache keeps only the
// kBf16MatmulCacheCapacity most recently used ones (making one again costs well under a millisecond).
struct MatmulKey {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  float beta;
  auto tie() const { return std::tie(trans_a, trans_b, M, N, K, lda, ldb, ldc, beta); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct Bf16Matmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul primitive;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::atomic<bool>& bf16_kernel_enabled() {
  static std::atomic<bool> enabled{bf16_kernel_preferred()};
  return enabled;
}

// Entries are shared pointers, so one evicted while another thread still runs it stays alive until done.
struct Bf16MatmulCache {
  std::mutex mutex;
  LruCache<MatmulKey, std::shared_ptr<const Bf16Matmul>> primitives{kBf16MatmulCacheCapacity};
  size_t made = 0;
};

Bf16MatmulCache& bf16_cache() {
  static Bf16MatmulCache cache;
  return cache;
}

// The cached oneDNN bf16 matmul for these shapes, or null where this CPU has none.
std::shared_ptr<const Bf16Matmul> bf16_matmul(const MatmulKey& key) {
  if (!bf16_kernel_enabled().load(std::memory_order_relaxed)) return nullptr;
  Bf16MatmulCache& cache = bf16_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  if (const auto* found = cache.primitives.find(key)) return *found;
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  // Row-major with leading dimensions; a transposed operand is the same memory with its strides swapped.
  const dnnl::memory::desc a({key.M, key.K}, dt::bf16, key.trans_a ? dims{1, key.lda} : dims{key.lda, 1});
  const dnnl::memory::desc b({key.K, key.N}, dt::bf16, key.trans_b ? dims{1, key.ldb} : dims{key.ldb, 1});
  const dnnl::memory::desc c({key.M, key.N}, dt::f32, dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  std::shared_ptr<const Bf16Matmul> made;
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    made = std::make_shared<const Bf16Matmul>(Bf16Matmul{a, b, c, dnnl::matmul(pd)});
  } catch (const dnnl::error&) {  // oneDNN has bf16 kernels for AVX-512 CPUs; older ones have none
    return nullptr;
  }
  ++cache.made;
  return cache.primitives.insert(key, std::move(made));
}

void scale_rows(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

// op(X) of a rows×cols product operand, widened exactly into a dense fp32 copy with the same layout.
void widen(Half type, std::vector<float>& out, const uint16_t* X, bool trans, int64_t rows, int64_t cols,
           int64_t ld) {
  const int64_t outer = trans ? cols : rows, inner = trans ? rows : cols;
  out.resize(static_cast<size_t>(outer * inner));
  for (int64_t r = 0; r < outer; ++r) {
    if (type == Half::F16)
      half_to_float(out.data() + r * inner, X + r * ld, inner);
    else
      bf16_to_float(out.data() + r * inner, X + r * ld, inner);
  }
}

}  // namespace

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
  if (K == 0) return scale_rows(C, M, N, ldc, beta);  // oneDNN rejects K == 0; only the beta scaling remains
  // With several threads and enough rows, each thread multiplies its own block of rows of C with a
  // single-threaded sgemm (oneDNN runs on one thread inside a parallel region). This keeps every thread
  // on a whole panel of B and measured 2-4% faster than oneDNN's own split on the FFN-down shape
  // (docs/BENCHMARKS.md). Small M (decoding one token) is left to oneDNN, which splits N instead, and so is a B of
  // more than kMostRowSplitB values: each thread would pack all of it, from memory. On the AVX2 EPYC a
  // Llama-3.2-1B shape's FFN (8192 × 2048, 512 rows) ran at 120-122 against oneDNN's 143-149 GFLOP/s and its
  // 512-token prompts 1.12-1.30× faster in seven pairs of eight; GPT-2-124M's training steps, whose LM head
  // (50257 × 768) now goes to oneDNN, 1.03-1.09×; its other matrices (2.4M values at most) keep the row split, and
  // 2048 × 2048 ran level either way. B is the weight in a forward, the activations in a weight's gradient.
  constexpr int64_t kMinRowsPerThread = 256;
  constexpr int64_t kMostRowSplitB = int64_t{2048} * 2048;
  const int threads = num_threads();
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  if (threads > 1 && M >= kMinRowsPerThread * threads && N * K <= kMostRowSplitB) {
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

void gemm_half(Half type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_rows(C, M, N, ldc, beta);
  const std::shared_ptr<const Bf16Matmul> mm = type == Half::BF16 ? bf16_matmul({trans_a, trans_b, M, N, K, lda, ldb, ldc, beta}) : nullptr;
  if (mm == nullptr) {  // fp16, or bf16 on a CPU without a oneDNN bf16 kernel: the same numbers through sgemm
    thread_local std::vector<float> a, b;
    widen(type, a, A, trans_a, M, K, lda);
    widen(type, b, B, trans_b, K, N, ldb);
    return gemm<float>(trans_a, trans_b, M, N, K, 1.0f, a.data(), trans_a ? M : K, b.data(), trans_b ? K : N, beta, C,
                       ldc);
  }
  const dnnl::engine& engine = cpu_engine();
  dnnl::memory a(mm->a, engine, const_cast<uint16_t*>(A)), b(mm->b, engine, const_cast<uint16_t*>(B));
  dnnl::memory c(mm->c, engine, C);
  dnnl::stream stream(engine);
  mm->primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
}

void set_bf16_kernel_enabled(bool enabled) { bf16_kernel_enabled() = enabled; }

bool bf16_kernel_in_use() { return bf16_kernel_enabled().load(std::memory_order_relaxed) && bf16_kernel_available(); }

bool bf16_kernel_preferred() {
  static const bool preferred = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return forced_choice("ATTEND_BF16_GEMM", !cpu_is_intel() || (isa & amx) == amx);
  }();
  return preferred;
}

bool bf16_kernel_available() {
  static const bool available = [] {
    // Native bf16 dot products (AVX-512 BF16, or AMX, whose ISA includes it) in what oneDNN may use: below that
    // oneDNN still makes a bf16 matmul, emulated, and slower than sgemm (AVX-512 without BF16: Skylake-SP,
    // Cascade Lake, Ice Lake; or a lower ONEDNN_MAX_CPU_ISA).
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    if ((isa & bf16) != bf16) return false;
    try {
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::format_tag::ab);
      const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

Bf16MatmulCacheStats bf16_matmul_cache_stats() {
  Bf16MatmulCache& cache = bf16_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  return {cache.primitives.size(), cache.made};
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

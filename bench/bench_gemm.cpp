// sgemm throughput: Attend's matmul (the linear layer's call, out = inp · weightᵀ) beside the raw
// libraries in the same run: oneDNN's sgemm, which Attend uses, and OpenBLAS as the environment
// configures it (this machine presets OPENBLAS_CORETYPE=Haswell, pinning it to AVX2 kernels).
//
//   build/bench/attend_bench --benchmark_filter=Gemm --benchmark_counters_tabular=true
//
// Shapes are GPT-2-small's: (2048×768)·(768×2304) QKV, (2048×768)·(768×3072) FFN up,
// (2048×3072)·(3072×768) FFN down. The argument after the shape is the thread count.
#include "kernels/matmul.h"

#include <attend/rng.h>
#include <attend/runtime.h>
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>

#ifdef ATTEND_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include <vector>

namespace {

struct Operands {
  std::vector<float> a, b, c;
  Operands(int64_t M, int64_t N, int64_t K) : a(M * K), b(K * N), c(M * N) {
    attend::Rng rng(1);
    for (float& x : a) x = rng.uniform() - 0.5f;
    for (float& x : b) x = rng.uniform() - 0.5f;
  }
};

void set_flops(benchmark::State& state, int64_t M, int64_t N, int64_t K) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(attend::num_threads());
}

// args: M, N, K, threads
void BM_Gemm_AttendMatmul(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  attend::set_num_threads(static_cast<int>(state.range(3)));
  Operands o(M, N, K);  // b is the weight (N, K) = (OC, C)
  for (auto _ : state) {
    attend::kernels::matmul_forward<float>(o.c.data(), o.a.data(), o.b.data(), nullptr, M, K, N);
    benchmark::ClobberMemory();
  }
  set_flops(state, M, N, K);
}

// oneDNN's sgemm on the same operands, threaded its own way (Attend's gemm splits the rows between threads).
void BM_Gemm_RawOneDnn(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  attend::set_num_threads(static_cast<int>(state.range(3)));
  Operands o(M, N, K);
  for (auto _ : state) {
    dnnl_sgemm('N', 'T', M, N, K, 1.0f, o.a.data(), K, o.b.data(), K, 0.0f, o.c.data(), N);  // as matmul_forward
    benchmark::ClobberMemory();
  }
  set_flops(state, M, N, K);
}

#ifdef ATTEND_BENCH_OPENBLAS
void BM_Gemm_RawOpenBlasAsConfigured(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  attend::set_num_threads(static_cast<int>(state.range(3)));
  openblas_set_num_threads(static_cast<int>(state.range(3)));
  Operands o(M, N, K);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, o.a.data(), K, o.b.data(), N, 0.0f,
                o.c.data(), N);
    benchmark::ClobberMemory();
  }
  set_flops(state, M, N, K);
  state.SetLabel(openblas_get_corename());
}
#endif

void gpt2_shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({2048, 2304, 768, threads});
    b->Args({2048, 3072, 768, threads});
    b->Args({2048, 768, 3072, threads});
  }
  // A 512-token prompt's four products (QKV, attention output, FFN up, FFN down) on two threads.
  b->Args({512, 2304, 768, 2})->Args({512, 768, 768, 2})->Args({512, 3072, 768, 2})->Args({512, 768, 3072, 2});
  // And a Llama-3.2-1B shape's (q and o, k and v, gate and up, down).
  b->Args({512, 2048, 2048, 2})->Args({512, 512, 2048, 2})->Args({512, 8192, 2048, 2})->Args({512, 2048, 8192, 2});
  b->Args({2048, 8192, 2048, 2})->Args({2048, 2048, 8192, 2});  // its FFN in training, four sequences of 512
  b->ArgNames({"M", "N", "K", "threads"})->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
}

BENCHMARK(BM_Gemm_AttendMatmul)->Apply(gpt2_shapes);
BENCHMARK(BM_Gemm_RawOneDnn)->Apply(gpt2_shapes);
#ifdef ATTEND_BENCH_OPENBLAS
BENCHMARK(BM_Gemm_RawOpenBlasAsConfigured)->Apply(gpt2_shapes);
#endif

}  // namespace

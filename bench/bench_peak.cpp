// The core's own arithmetic rates, the ceilings the kernels' figures are read against: chains of independent
// multiply-adds with nothing loaded or stored (twelve accumulators, more than latency × ports), per instruction
// set, in multiply-adds a second per thread. What one instruction does: vfmadd231ps 8 (ymm) or 16 (zmm)
// products; vdpbf16ps 32 (pairs of bf16 into fp32 lanes); vpdpbusd 64 (fours of u8 × s8 into int32 lanes);
// AVX2's int8 pair vpmaddubsw + vpmaddwd 32 for two instructions. Each thread of `threads` runs its own chains.
//
//   build/bench/attend_bench --benchmark_filter=Peak --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <cstdint>

namespace {

constexpr int64_t kRounds = 1 << 22;  // per thread and iteration: 12 instructions a round

// A lane of the result, so that the loop is not dropped (GCC 12's _mm512_reduce_* warn in a target function).
[[gnu::target("avx512f")]] inline float first_lane(__m512 v) { return _mm512_cvtss_f32(v); }

// The multiply-adds of one instruction, the instruction set the CPU must have, and the loop. Each loop keeps its
// values finite and away from denormals (a multiply-add on infinities ran faster than on numbers on the Xeon).
struct Fma256 {
  static constexpr int kMacs = 8;
  static bool supported() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
  [[gnu::target("avx2,fma"), gnu::noinline]] static float run(int64_t rounds, float seed) {
    const __m256 x = _mm256_set1_ps(seed), y = _mm256_set1_ps(1e-7f);
    __m256 r[12];
    for (int i = 0; i < 12; ++i) r[i] = _mm256_set1_ps(static_cast<float>(i));
    for (int64_t k = 0; k < rounds; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) r[i] = _mm256_fmadd_ps(x, y, r[i]);
    float s = 0;
    for (int i = 0; i < 12; ++i) s += _mm256_cvtss_f32(r[i]);
    return s;
  }
};

struct Fma512 {
  static constexpr int kMacs = 16;
  static bool supported() { return __builtin_cpu_supports("avx512f"); }
  [[gnu::target("avx512f"), gnu::noinline]] static float run(int64_t rounds, float seed) {
    const __m512 x = _mm512_set1_ps(seed), y = _mm512_set1_ps(1e-7f);
    __m512 r[12];
    for (int i = 0; i < 12; ++i) r[i] = _mm512_set1_ps(static_cast<float>(i));
    for (int64_t k = 0; k < rounds; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) r[i] = _mm512_fmadd_ps(x, y, r[i]);
    float s = 0;
    for (int i = 0; i < 12; ++i) s += first_lane(r[i]);
    return s;
  }
};

struct DotBf16 {
  static constexpr int kMacs = 32;
  static bool supported() { return __builtin_cpu_supports("avx512bf16"); }
  [[gnu::target("avx512f,avx512bf16"), gnu::noinline]] static float run(int64_t rounds, float seed) {
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(seed), _mm512_set1_ps(seed));
    const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
    __m512 r[12];
    for (int i = 0; i < 12; ++i) r[i] = _mm512_set1_ps(static_cast<float>(i));
    for (int64_t k = 0; k < rounds; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) r[i] = _mm512_dpbf16_ps(r[i], x, y);
    float s = 0;
    for (int i = 0; i < 12; ++i) s += first_lane(r[i]);
    return s;
  }
};

struct DotInt8Vnni {
  static constexpr int kMacs = 64;
  static bool supported() { return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }
  [[gnu::target("avx512f,avx512bw,avx512vnni"), gnu::noinline]] static float run(int64_t rounds, float seed) {
    const __m512i x = _mm512_set1_epi8(static_cast<char>(1 + static_cast<int>(seed))), y = _mm512_set1_epi8(3);
    __m512i r[12];
    for (int i = 0; i < 12; ++i) r[i] = _mm512_set1_epi32(i);
    for (int64_t k = 0; k < rounds; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) r[i] = _mm512_dpbusd_epi32(r[i], x, y);
    int64_t s = 0;
    for (int i = 0; i < 12; ++i) s += _mm512_cvtsi512_si32(r[i]);
    return static_cast<float>(s);
  }
};

// AVX2's int8 products: vpmaddubsw (u8 × s8 pairs into int16) then vpmaddwd by ones (pairs into int32), added:
// three instructions for 32 multiply-adds; the count below is per multiply-add, as the others.
struct DotInt8Avx2 {
  static constexpr int kMacs = 32;
  static bool supported() { return __builtin_cpu_supports("avx2"); }
  [[gnu::target("avx2"), gnu::noinline]] static float run(int64_t rounds, float seed) {
    const __m256i x = _mm256_set1_epi8(static_cast<char>(1 + static_cast<int>(seed))), y = _mm256_set1_epi8(3);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i r[12];
    for (int i = 0; i < 12; ++i) r[i] = _mm256_set1_epi32(i);
    __m256i u = x;
    for (int64_t k = 0; k < rounds; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) {
        asm("" : "+x"(u));  // each accumulator's products made anew (the same u × y would be worked out once)
        r[i] = _mm256_add_epi32(r[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), ones));
      }
    int64_t s = 0;
    for (int i = 0; i < 12; ++i) s += _mm256_extract_epi32(r[i], 0);
    return static_cast<float>(s);
  }
};

template <typename Op>
void BM_Peak(benchmark::State& state) {
  if (!Op::supported()) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  float sink = 0;
  for (auto _ : state) {
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += Op::run(kRounds, 0.5f + static_cast<float>(omp_get_thread_num()));
  }
  benchmark::DoNotOptimize(sink);
  const double macs = double(kRounds) * 12 * Op::kMacs * threads;
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s a thread"] = benchmark::Counter(macs * 1e-9 / threads, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Peak<Fma256>)->Name("BM_Peak/fma_f32_ymm")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
BENCHMARK(BM_Peak<Fma512>)->Name("BM_Peak/fma_f32_zmm")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
BENCHMARK(BM_Peak<DotBf16>)->Name("BM_Peak/dot_bf16_zmm")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
BENCHMARK(BM_Peak<DotInt8Vnni>)->Name("BM_Peak/dot_int8_vnni_zmm")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
BENCHMARK(BM_Peak<DotInt8Avx2>)->Name("BM_Peak/dot_int8_avx2_ymm")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();

}  // namespace

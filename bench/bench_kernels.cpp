// Memory-bound kernels, forward + backward, in GB/s of compulsory traffic (each array read or written
// once), beside the machine's own memory bandwidth measured in the same run (a STREAM-style triad).
//
//   build/bench/attend_bench --benchmark_filter='Bandwidth|Kernel|Decode' --benchmark_counters_tabular=true
#include "nn/kv_cache.h"
#include "kernels/activation.h"
#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "kernels/softmax.h"

#include <attend/generate.h>
#include <attend/rng.h>
#include <attend/runtime.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <new>
#include <vector>

namespace {

// The kernels' operands 64-byte aligned, as Attend's tensors are (glibc's malloc gives 16 bytes: every 512-bit
// load of a row would cross two cache lines, which cost the 8-row gemv a third of its rate on the Xeon).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const Aligned64&) const { return true; }
};
template <typename T>
using Buffer = std::vector<T, Aligned64<T>>;

Buffer<float> random_floats(int64_t n, uint64_t seed) {
  attend::Rng rng(seed);
  Buffer<float> v(n);
  for (float& x : v) x = 4.0f * rng.uniform() - 2.0f;
  return v;
}

void set_bandwidth(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(attend::num_threads());
}

// a = b + s·c over 3 × 128 MiB: 2 reads + 1 write per element (write-allocate not counted, as STREAM).
void BM_Bandwidth_Triad(benchmark::State& state) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t n = int64_t{32} << 20;
  Buffer<float> a(n), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    attend::kernels::parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 3.0 * n * sizeof(float));
}

// Softmax over (4096, 2048) rows: forward reads z, writes p; backward reads dp, p, and adds into dz.
void BM_Kernel_SoftmaxForwardBackward(benchmark::State& state) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t N = 4096, V = 2048;
  auto z = random_floats(N * V, 1), dp = random_floats(N * V, 2);
  Buffer<float> p(N * V), dz(N * V);
  for (auto _ : state) {
    attend::kernels::softmax_forward(p.data(), z.data(), N, V, 1.0f);
    attend::kernels::softmax_backward(dz.data(), dp.data(), p.data(), N, V, 1.0f);
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, (2.0 + 4.0) * N * V * sizeof(float));
}

// LayerNorm over (8192, 768): forward reads x, writes y; backward reads dy, x and adds into dx.
void BM_Kernel_LayerNormForwardBackward(benchmark::State& state) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t N = 8192, C = 768;
  auto x = random_floats(N * C, 1), dy = random_floats(N * C, 2), w = random_floats(C, 3), b = random_floats(C, 4);
  Buffer<float> y(N * C), dx(N * C), dw(C), db(C), mean(N), rstd(N);
  for (auto _ : state) {
    attend::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    attend::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                        rstd.data(), N, C);
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, (2.0 + 4.0) * N * C * sizeof(float));
}

// GELU (tanh form, GPT-2's) over (8192, 3072): forward reads x, writes y; backward reads dy, x, adds into dx.
void BM_Kernel_GeluForwardBackward(benchmark::State& state) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t n = int64_t{8192} * 3072;
  auto x = random_floats(n, 1), dy = random_floats(n, 2);
  Buffer<float> y(n), dx(n);
  for (auto _ : state) {
    attend::kernels::activation_forward(attend::Activation::GELUTanh, y.data(), x.data(), n);
    attend::kernels::activation_backward(attend::Activation::GELUTanh, dx.data(), dy.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, (2.0 + 4.0) * n * sizeof(float));
}

// AdamW's update over 32M parameters (128 MiB each of weights, gradients and the two moments): reads θ, g, m, v
// and writes θ, m, v, 28 bytes a parameter; GPT-2-124M's step streams four times as much.
void BM_Kernel_AdamW(benchmark::State& state) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t n = int64_t{32} << 20;
  auto param = random_floats(n, 1), grad = random_floats(n, 2), m = random_floats(n, 3), v = random_floats(n, 4);
  for (float& x : v) x = x * x;
  const attend::kernels::AdamStep step{.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .gain1 = 0.1f,
                                       .gain2 = 1e-3f, .correction1 = 0.5, .correction2 = 0.25, .decoupled = 0.1f};
  for (auto _ : state) {
    attend::kernels::adam_update(param.data(), m.data(), v.data(), grad.data(), n, step);
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 7.0 * n * sizeof(float));
}

// Decoding's matmul: one row times GPT-2's tied LM head (50257 × 768), a stream through 154 MB of fp32
// weights (77 MB as bf16); the GB/s are the weight bytes read.
void BM_Decode_Gemv(benchmark::State& state, bool bf16) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t V = 50257, C = 768;
  const Buffer<float> w = random_floats(V * C, 1), x = random_floats(C, 2);
  Buffer<uint16_t> w16(bf16 ? V * C : 0);
  if (bf16) attend::kernels::float_to_bf16(w16.data(), w.data(), V * C);
  Buffer<float> out(V);
  for (auto _ : state) {
    if (bf16)
      attend::kernels::matmul_forward_bf16(out.data(), x.data(), w16.data(), nullptr, 1, C, V);
    else
      attend::kernels::matmul_forward(out.data(), x.data(), w.data(), static_cast<const float*>(nullptr), 1, C, V);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, double(V * C) * (bf16 ? 2.0 : 4.0));
}

// A server's batched decoding step: `rows` input rows times GPT-2's LM head in fp16 (77 MB) or fp32 (154 MB), or a
// matrix of the same bytes with rows of `in` = 3072 channels (as GPT-2's FFN down projection's), the row-invariant
// gemv (matmul_forward_f16, matmul_forward_rows: each weight row loaded once for several input rows); GMAC/s of
// products.
void decode_gemv_rows(benchmark::State& state, bool f16) {
  attend::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t N = state.range(0), C = state.range(2), V = 50257 * 768 / C;
  const Buffer<float> w = random_floats(V * C, 1), x = random_floats(N * C, 2);
  Buffer<uint16_t> w16(f16 ? V * C : 0);
  if (f16) attend::kernels::float_to_half(w16.data(), w.data(), V * C);
  Buffer<float> out(N * V);
  for (auto _ : state) {
    if (f16)
      attend::kernels::matmul_forward_f16(out.data(), x.data(), w16.data(), nullptr, N, C, V);
    else
      attend::kernels::matmul_forward_rows(out.data(), x.data(), w.data(), nullptr, N, C, V);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, double(V * C) * (f16 ? 2.0 : 4.0));
  state.counters["GMAC/s"] = benchmark::Counter(double(N * V * C) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Decode_GemvRowsF16(benchmark::State& state) { decode_gemv_rows(state, true); }
void BM_Decode_GemvRowsF32(benchmark::State& state) { decode_gemv_rows(state, false); }

// Drawing one token from GPT-2's 50,257 logits (uniform in [−6, 6): a flat distribution, most of it in a top-p
// nucleus of 0.95), as a server does for each sequence each step on its engine thread; µs a token.
void BM_Sample_Token(benchmark::State& state, attend::SamplingOptions options) {
  const int64_t V = 50257;
  Buffer<float> logits = random_floats(V, 9);
  for (float& z : logits) z *= 3.0f;
  attend::Rng rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(attend::sample_token(logits.data(), V, options, rng.uniform_double()));
}

// Decoding's attention: one query of GPT-2's shape (12 heads of 64) against 576 cached positions, the mean
// position of bench/generate_bench.cpp's tokens, over 48 layers of cache (85 MB in fp16, more than the
// last-level cache, as GPT-2's 12 layers are between a token's 495 MB of weights); GB/s of cache read.
void BM_Decode_Attention(benchmark::State& state, attend::CacheType storage) {
  attend::set_num_threads(static_cast<int>(state.range(0)));
  const int64_t layers = 48, T = 576, H = 12, D = 64;
  attend::nn::KVCache cache({.n_layers = layers, .batch = 1, .max_T = T, .n_kv_heads = H, .d_head = D, .storage = storage});
  const Buffer<float> kv = random_floats(T * H * D, 3), q = random_floats(H * D, 4);
  for (int64_t l = 0; l < layers; ++l) {
    cache.write(l, 0, kv.data(), kv.data(), T);
  }
  Buffer<float> out(H * D);
  attend::kernels::AttentionParams<float> p;
  p.Tq = 1, p.Tk = T, p.n_heads = H, p.n_kv_heads = H, p.d_head = D, p.causal = true, p.q_offset = T - 1;
  for (auto _ : state) {
    for (int64_t l = 0; l < layers; ++l) cache.attend(l, out.data(), q.data(), p);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, double(cache.memory_bytes()));
}

// Decoding's matmuls with Q8_0 (Q4_0) weights repacked eight rows at a time, as a server's batched step runs them:
// the matrices of one GPT-2-124M token (12 layers of qkv 2304 × 768, o 768 × 768, up 3072 × 768, down 768 × 3072,
// and the tied LM head 50257 × 768: 132 MB of Q8_0 blocks, 70 MB of Q4_0, more than the last-level cache) times N
// input rows. GB/s of blocks read, and GMAC/s (N multiply-adds a weight).
void decode_gemv_x8(benchmark::State& state, attend::kernels::QuantType type) {
  using namespace attend::kernels;
  attend::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t N = state.range(0), C = 768;
  struct Matrix {
    int64_t rows, cols;
    Buffer<uint8_t> blocks, repacked;
  };
  std::vector<Matrix> matrices;
  auto add = [&](int64_t rows, int64_t cols) {
    const bool q8 = type == QuantType::Q8_0;
    Matrix m{rows, cols, Buffer<uint8_t>(rows * quant_row_bytes(type, cols)),
             Buffer<uint8_t>(q8 ? q8_0x8_bytes(rows, cols) : q4_0x8_bytes(rows, cols))};
    const Buffer<float> w = random_floats(rows * cols, 10 + matrices.size());
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(type, m.blocks.data() + r * quant_row_bytes(type, cols), w.data() + r * cols, cols);
    (q8 ? repack_q8_0x8 : repack_q4_0x8)(m.repacked.data(), m.blocks.data(), rows, cols);
    matrices.push_back(std::move(m));
  };
  for (int layer = 0; layer < 12; ++layer) add(3 * C, C), add(C, C), add(4 * C, C), add(C, 4 * C);
  add(50257, C);
  const Buffer<float> x = random_floats(N * 4 * C, 2);
  Buffer<float> out(N * 50257);
  double bytes = 0, macs = 0;
  for (const Matrix& m : matrices) bytes += double(m.blocks.size()), macs += double(N * m.rows * m.cols);
  for (auto _ : state) {
    for (const Matrix& m : matrices)
      matmul_forward_x8(type, out.data(), x.data(), m.repacked.data(), m.blocks.data(), nullptr, N, m.cols, m.rows);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, bytes);
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Decode_GemvQ8_0x8(benchmark::State& state) { decode_gemv_x8(state, attend::kernels::QuantType::Q8_0); }
void BM_Decode_GemvQ4_0x8(benchmark::State& state) { decode_gemv_x8(state, attend::kernels::QuantType::Q4_0); }

// The same kernel on one 768 × 768 matrix (590 KB of blocks, inside a Zen 4 or recent Intel core's L2): its
// arithmetic rate with the weights' reads out of the way, the bound of the many-row steps above.
void BM_Decode_GemvQ8_0x8_InCache(benchmark::State& state) {
  using namespace attend::kernels;
  attend::set_num_threads(1);
  const int64_t N = state.range(0), C = 768, OC = 768;
  Buffer<uint8_t> blocks(OC * quant_row_bytes(QuantType::Q8_0, C)), repacked(q8_0x8_bytes(OC, C));
  const Buffer<float> w = random_floats(OC * C, 10);
  for (int64_t r = 0; r < OC; ++r)
    quantize_row(QuantType::Q8_0, blocks.data() + r * quant_row_bytes(QuantType::Q8_0, C), w.data() + r * C, C);
  repack_q8_0x8(repacked.data(), blocks.data(), OC, C);
  const Buffer<float> x = random_floats(N * C, 2);
  Buffer<float> out(N * OC);
  for (auto _ : state) {
    matmul_forward_x8(QuantType::Q8_0, out.data(), x.data(), repacked.data(), blocks.data(), nullptr, N, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(double(N * OC * C) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One input row against one 768 × 768 matrix of fp32, bf16 or fp16 weights (2.4 MB, 1.2 MB: inside L2 of a Zen 4
// or recent Intel core for the 16-bit formats, in L2 and L3 for fp32): the one-row kernels' arithmetic rate, with
// the reads from memory out of the way, which bounds how fast generation can stream the weights on one core.
void BM_Decode_GemvInCache(benchmark::State& state, int format) {
  using namespace attend::kernels;
  attend::set_num_threads(1);
  const int64_t C = 768, OC = 768;
  const Buffer<float> w = random_floats(OC * C, 11), x = random_floats(C, 2);
  Buffer<uint16_t> w16(OC * C);
  if (format == 1) float_to_bf16(w16.data(), w.data(), OC * C);
  if (format == 2) float_to_half(w16.data(), w.data(), OC * C);
  Buffer<float> out(OC);
  for (auto _ : state) {
    if (format == 0) matmul_forward(out.data(), x.data(), w.data(), static_cast<const float*>(nullptr), 1, C, OC);
    if (format == 1) matmul_forward_bf16(out.data(), x.data(), w16.data(), nullptr, 1, C, OC);
    if (format == 2) matmul_forward_f16(out.data(), x.data(), w16.data(), nullptr, 1, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, double(OC * C) * (format == 0 ? 4.0 : 2.0));
}

// A server's row-invariant step on fp32 weights (matmul_forward_rows) with the weights inside L2 (768 KiB: 256 rows
// of 768 channels, or 64 of 3,072 as GPT-2's FFN down projection's), one thread: the kernel's arithmetic rate with
// the reads from memory out of the way, which bounds a batched step's rate; GMAC/s of products.
void BM_Decode_GemvRowsF32InCache(benchmark::State& state) {
  using namespace attend::kernels;
  attend::set_num_threads(1);
  const int64_t N = state.range(0), C = state.range(1), OC = int64_t{196608} / C;
  const Buffer<float> w = random_floats(OC * C, 13), x = random_floats(N * C, 2);
  Buffer<float> out(N * OC);
  for (auto _ : state) {
    matmul_forward_rows(out.data(), x.data(), w.data(), nullptr, N, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(double(N * OC * C) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The K types' kernel (Q4_K, Q5_K, Q6_K: the mix of a Q4_K_M file) on one 512 × 1,536 matrix (0.4-0.7 MB, inside
// L2 of a Zen 4 or recent Intel core) against 1 input row (decoding) or 64 (a prompt's tile, four rows a pass over
// each block), one thread: the arithmetic rate, with the reads from memory out of the way. Compare instruction
// sets in one run with ATTEND_ISA.
void BM_Decode_GemvKInCache(benchmark::State& state) {
  using namespace attend::kernels;
  attend::set_num_threads(1);
  const QuantType type = static_cast<QuantType>(state.range(0));
  const int64_t N = state.range(1), C = 1536, OC = 512;
  const int64_t row_bytes = quant_row_bytes(type, C);
  Buffer<uint8_t> blocks(OC * row_bytes);
  const Buffer<float> w = random_floats(OC * C, 12), x = random_floats(N * C, 2);
  for (int64_t r = 0; r < OC; ++r) quantize_row(type, blocks.data() + r * row_bytes, w.data() + r * C, C);
  Buffer<float> out(N * OC);
  for (auto _ : state) {
    matmul_forward_quant_rows(type, out.data(), x.data(), blocks.data(), nullptr, N, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(quant_format(type).name);
  set_bandwidth(state, double(blocks.size()));
  state.counters["GMAC/s"] = benchmark::Counter(double(N * OC * C) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void threads_1_2(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Bandwidth_Triad)->Apply(threads_1_2);
BENCHMARK(BM_Kernel_SoftmaxForwardBackward)->Apply(threads_1_2);
BENCHMARK(BM_Kernel_LayerNormForwardBackward)->Apply(threads_1_2);
BENCHMARK(BM_Kernel_GeluForwardBackward)->Apply(threads_1_2);
BENCHMARK(BM_Kernel_AdamW)->Apply(threads_1_2);
BENCHMARK_CAPTURE(BM_Decode_Gemv, f32, false)->Apply(threads_1_2);
BENCHMARK_CAPTURE(BM_Decode_Gemv, bf16, true)->Apply(threads_1_2);
BENCHMARK(BM_Decode_GemvRowsF16)->ArgsProduct({{1, 2, 4, 8, 16, 32, 64}, {1, 2}, {768, 3072}})->ArgNames({"rows", "threads", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvRowsF32)->ArgsProduct({{1, 2, 4, 8}, {1, 2}, {768}})->ArgNames({"rows", "threads", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvQ8_0x8)->ArgsProduct({{1, 2, 4, 8}, {1, 2}})->ArgNames({"rows", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvQ4_0x8)->ArgsProduct({{1, 2, 4, 8}, {1, 2}})->ArgNames({"rows", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvQ8_0x8_InCache)->Arg(1)->Arg(8)->ArgName("rows")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvRowsF32InCache)->ArgsProduct({{1, 2, 4, 8}, {768, 3072}})->ArgNames({"rows", "in"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Decode_GemvKInCache)
    ->ArgsProduct({{int(attend::kernels::QuantType::Q4_K), int(attend::kernels::QuantType::Q5_K), int(attend::kernels::QuantType::Q6_K)}, {1, 64}})
    ->ArgNames({"type", "rows"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode_GemvInCache, f32, 0)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode_GemvInCache, bf16, 1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode_GemvInCache, f16, 2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Sample_Token, greedy, attend::SamplingOptions{.greedy = true})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample_Token, temperature_1, attend::SamplingOptions{})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample_Token, top_p_0_95, attend::SamplingOptions{.temperature = 0.8, .top_p = 0.95})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample_Token, top_k_40, attend::SamplingOptions{.top_k = 40})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decode_Attention, f32, attend::CacheType::F32)->Apply(threads_1_2);
BENCHMARK_CAPTURE(BM_Decode_Attention, f16, attend::CacheType::F16)->Apply(threads_1_2);

}  // namespace

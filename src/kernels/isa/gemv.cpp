// Decoding's matmul: one row (or a few) times each weight row, a stream through the weights bound by
// memory. The weights are fp32, bf16 or fp16; products and sums are fp32.
#include "kernels/cpu.h"
#include "kernels/isa/isa.h"
#include "kernels/isa/channels.h"
#include "kernels/isa/lanes.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <type_traits>

namespace attend::kernels::ATTEND_ISA {
namespace {

// The dot products use GCC's vector extension directly (lanes.h) and sum in float. Through vec::sum's
// double blocks they streamed 22 GB/s through GPT-2's 495 MB on the AVX-512 machine; like this, 40-48 GB/s
// (docs/BENCHMARKS.md).
using lanes::Lanes;

struct Fp32 {
  static Lanes load(const float* p) { return lanes::load(p); }
  static float widen(float w) { return w; }
};
struct Bf16 {
  static Lanes load(const uint16_t* p) { return lanes::load_bf16(p); }
  static float widen(uint16_t w) { return lanes::widen_bf16(w); }
};
struct Fp16 {
  static Lanes load(const uint16_t* p) { return lanes::load_f16(p); }
  static float widen(uint16_t w) { return lanes::widen_f16(w); }
};

// out[n·out_stride] = Σ_c x[n·C + c]·w[c] + bias for the R input rows n: each weight row is loaded (and widened)
// once for all R rows. Each row's sum runs 32 channels a step in 32/kLanes independent accumulators (two AVX-512
// registers, four AVX2 ones), so that the FMAs' latency does not bound the loop, in the same order for every R:
// a row's result is the same bits however many rows pass with it (the server's batches rely on that).
constexpr int64_t kStep = 32, kAccumulators = kStep / lanes::kLanes;

// The end of one row's sum, the same for every kernel below (so that each row's result is the same bits): the
// accumulators added in order, their lanes summed, then the scalar tail of channels [c, C).
template <typename Format, typename W>
[[gnu::always_inline]] inline float finish(Lanes (&acc)[kAccumulators], const float* x, const W* w, int64_t c, int64_t C) {
#pragma GCC unroll 16
  for (int64_t a = 1; a < kAccumulators; ++a) acc[0] += acc[a];
  float s = lanes::sum(acc[0]);
  // An explicit fused multiply-add: left to GCC, the tail was contracted in some kernels and not in others (or
  // vectorized as products, then added), and a row's bits depended on the kernel that ran it.
  for (int64_t t = c; t < C; ++t) s = std::fma(x[t], Format::widen(w[t]), s);
  return s;
}

// Prefetch: the weights read lanes::kPrefetchAhead bytes ahead in software (for several rows a pass always; for one row where
// gemv_prefetch() says, kernels/cpu.h).
template <typename Format, int64_t R, bool Prefetch = (R > 1), typename W>
[[gnu::noinline]] void dots(float* out, int64_t out_stride, const float* x, const W* w, int64_t C, float bias) {
  // Every loop over rows and accumulators unrolled, so that the sums live in registers (an array the epilogue
  // indexed went through the stack: zeroed with rep stos, stored and reloaded, a third of a 768-channel row's time).
  Lanes acc[R][kAccumulators];
#pragma GCC unroll 16
  for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
    for (int64_t a = 0; a < kAccumulators; ++a) acc[n][a] = Lanes{};
  int64_t c = 0;
  for (; c + kStep <= C; c += kStep) {
    if constexpr (Prefetch)  // several rows a pass read the weights slower than the hardware prefetcher expects
      lanes::prefetch(reinterpret_cast<const char*>(w + c) + lanes::kPrefetchAhead, kStep * sizeof(W));
    if constexpr (R == 1) {  // each weight vector widened just before its product (the order below streamed
                             // fp16 rows 10-30% slower alone on Zen 4)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a)
        acc[0][a] += lanes::load(x + c + a * lanes::kLanes) * Format::load(w + c + a * lanes::kLanes);
      continue;
    }
    Lanes wc[kAccumulators];
#pragma GCC unroll 16
    for (int64_t a = 0; a < kAccumulators; ++a) wc[a] = Format::load(w + c + a * lanes::kLanes);
#pragma GCC unroll 16
    for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a) acc[n][a] += lanes::load(x + n * C + c + a * lanes::kLanes) * wc[a];
  }
#pragma GCC unroll 16
  for (int64_t n = 0; n < R; ++n) out[n * out_stride] = finish<Format>(acc[n], x + n * C, w, c, C) + bias;
}

// R input rows against K consecutive weight rows (a block): out[n·out_stride + k] = Σ_c x[n·C + c]·w[k·C + c] +
// bias[k]. Each (row, weight row) sum is the one dots<Format, 1> makes (the same accumulators, steps and
// epilogue), so the bits do not change. Eight rows against one weight row (dots<Format, 8>) load sixteen input
// vectors for sixteen products: the input rows, 8·C floats, leave L1 from about 1,024 channels on, and the kernel
// then ran at the rate L2 returns them (19-21 GMAC/s a core on Zen 4 at 2,048 and 3,072 channels, 38 at 768).
// Four rows against K weight rows load each input vector once for K products.
template <typename Format, int64_t R, int64_t K, typename W>
[[gnu::noinline]] void dots_block(float* out, int64_t out_stride, const float* x, const W* w, int64_t C, const float* bias) {
  Lanes acc[R][K][kAccumulators];
#pragma GCC unroll 16
  for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
    for (int64_t k = 0; k < K; ++k)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a) acc[n][k][a] = Lanes{};
  int64_t c = 0;
  for (; c + kStep <= C; c += kStep) {
#pragma GCC unroll 16
    for (int64_t k = 0; k < K; ++k)
      lanes::prefetch(reinterpret_cast<const char*>(w + k * C + c) + lanes::kPrefetchAhead, kStep * sizeof(W));
    Lanes wc[K][kAccumulators];
#pragma GCC unroll 16
    for (int64_t k = 0; k < K; ++k)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a) wc[k][a] = Format::load(w + k * C + c + a * lanes::kLanes);
#pragma GCC unroll 16
    for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a) {
        Lanes xv = lanes::load(x + n * C + c + a * lanes::kLanes);
        // Held in a register for its K products: GCC otherwise folds the load into each FMA, three loads of
        // every input vector where there are two load ports (the 4 x 3 block ran at 22 GMAC/s a core on the
        // Xeon, load-bound; docs/BENCHMARKS.md).
        asm("" : "+v"(xv));
#pragma GCC unroll 16
        for (int64_t k = 0; k < K; ++k) acc[n][k][a] += xv * wc[k][a];
      }
  }
#pragma GCC unroll 16
  for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
    for (int64_t k = 0; k < K; ++k)
      out[n * out_stride + k] = finish<Format>(acc[n][k], x + n * C, w + k * C, c, C) + (bias != nullptr ? bias[k] : 0.0f);
}

// One input row against K consecutive weight rows: out[k] = Σ_c x[c]·w[k·C + c] + bias[k]. Each row's sum is the
// one dots<Format, 1> makes (the same accumulators, steps and epilogue), so the bits do not change. For long rows
// the input row (C floats, twice a 16-bit weight row's bytes) no longer stays in L1 beside the weights streaming
// through, and one weight row at a time reads it back from L2 for every row; K rows a pass read it once for K.
// Taken for 16-bit rows of 8 KiB and more (Llama-3.2-1B's FFN down projection: 16 KiB), where one core streamed
// 22-24 GB/s against 12-13 one row at a time (Zen 4, AVX-512 and AVX2; a standalone loop) and Llama-3.2-1B's
// fp16 generation on one thread ran 15-20% faster. Rows of 3-6 KiB streamed slower eight at a time (20 against
// 22 GB/s), and GPT-2's fp32 FFN down projection (12 KiB rows) made its generation slower, not faster
// (docs/BENCHMARKS.md).
template <typename Format, int64_t K, typename W>
[[gnu::noinline]] void dots_across(float* out, const float* x, const W* w, int64_t C, const float* bias) {
  Lanes acc[K][kAccumulators];
#pragma GCC unroll 16
  for (int64_t k = 0; k < K; ++k)
#pragma GCC unroll 16
    for (int64_t a = 0; a < kAccumulators; ++a) acc[k][a] = Lanes{};
  int64_t c = 0;
  for (; c + kStep <= C; c += kStep) {
    Lanes xc[kAccumulators];
#pragma GCC unroll 16
    for (int64_t a = 0; a < kAccumulators; ++a) xc[a] = lanes::load(x + c + a * lanes::kLanes);
#pragma GCC unroll 16
    for (int64_t k = 0; k < K; ++k)
#pragma GCC unroll 16
      for (int64_t a = 0; a < kAccumulators; ++a) acc[k][a] += xc[a] * Format::load(w + k * C + c + a * lanes::kLanes);
  }
#pragma GCC unroll 16
  for (int64_t k = 0; k < K; ++k) out[k] = finish<Format>(acc[k], x, w + k * C, c, C) + (bias != nullptr ? bias[k] : 0.0f);
}

// Several input rows on AVX2. Its 16 registers hold the four accumulators of two input rows at most (dots<Format,
// 2>), which loads three vectors for two products (the input rows as the FMAs' memory operands): 19 GMAC/s a core
// against an FMA peak of 42 (rows of 768 channels in L2, the AVX2 EPYC). But a row's sum is four independent chains
// (accumulator a sums the lanes of channels [32t + 8a, 32t + 8a + 8) for t = 0, 1, ...), and nothing makes the
// chains run together: dots_chains runs one chain at a time for R input rows and K weight rows, R·K accumulators
// with the R + K vectors in registers, R + K loads for R·K products (3 × 3: 15 registers, 6 loads for 9 products;
// 26-29 GMAC/s). The chains run chunk by chunk of channels, their accumulators kept in `acc` between chunks, so that
// the four passes over a chunk find its rows in L1. Each sum is the one dots<Format, 1> makes, the same chains in the
// same order and the same finish, so the bits do not change.
template <typename Format, int64_t R, int64_t K, typename W>
[[gnu::noinline]] void dots_chains(Lanes (*acc)[K][kAccumulators], const float* x, const W* w, int64_t C, int64_t c0,
                                   int64_t c1) {
#pragma GCC unroll 4
  for (int64_t a = 0; a < kAccumulators; ++a) {
    Lanes sum[R][K];
#pragma GCC unroll 16
    for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
      for (int64_t k = 0; k < K; ++k) sum[n][k] = c0 == 0 ? Lanes{} : acc[n][k][a];
    for (int64_t c = c0 + a * lanes::kLanes; c < c1; c += kStep) {
      Lanes wv[K], xv[R];
#pragma GCC unroll 16
      for (int64_t k = 0; k < K; ++k) {
        wv[k] = Format::load(w + k * C + c);
        asm("" : "+v"(wv[k]));  // in registers, both: GCC would fold one side's loads into every FMA
      }
#pragma GCC unroll 16
      for (int64_t n = 0; n < R; ++n) {
        xv[n] = lanes::load(x + n * C + c);
        asm("" : "+v"(xv[n]));
      }
#pragma GCC unroll 16
      for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
        for (int64_t k = 0; k < K; ++k) sum[n][k] += xv[n] * wv[k];
    }
#pragma GCC unroll 16
    for (int64_t n = 0; n < R; ++n)
#pragma GCC unroll 16
      for (int64_t k = 0; k < K; ++k) acc[n][k][a] = sum[n][k];
  }
}

// From four input rows on AVX2 (two rows ran slower on the chains than one at a time, their step bound by memory;
// three were not measured). The K weight rows of a block are read side by side, a pattern the hardware prefetcher
// did not follow: 8 fp32 streams ran no faster than with dots<Fp32, 2> until the same chunk of the block
// kChainBlocksAhead ahead was fetched into L2 in software (into L1: no better than none; one block ahead: about the
// same). Then fp32 weights 1.2-1.5× from 4 streams to 16; bf16 and fp16 1.06-1.4× at 8 streams, about level at 4
// (docs/BENCHMARKS.md).
constexpr bool kChains = lanes::kLanes == 8;
constexpr int64_t kChainsFrom = 4;
constexpr int64_t kChainWeightRows = 3;
constexpr int64_t kChainTileRows = 24;      // input rows whose accumulators wait between chunks
// Channels a chunk: 96 for fp32 weights, 256 for 16-bit ones (384 and 512 bytes of each weight row). On the Zen 3
// EPYC, 8 fp32 streams 214-221 tokens/s at 256 channels, 241-248 at 192, 258-259 at 96 (4 streams +20%, 16 +10%);
// 16-bit rows slower so (F16 8 streams 309-330 against 346-366 at 256; bf16 level). On the Zen 4, 16 and 32 steps
// were slower than 8 (docs/BENCHMARKS.md).
template <typename W>
constexpr int64_t kChainChunk = (sizeof(W) == 4 ? 3 : 8) * kStep;
constexpr int64_t kChainBlocksAhead = 2;

// out rows [0, N) × K weight rows from o, by dots_chains: input rows in tiles, channels in chunks, each chunk's
// weight rows taken by every R input rows of the tile while they are in L1.
template <typename Format, int64_t K, typename W>
void chains_block(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C, int64_t OC,
                  int64_t o) {
  Lanes acc[kChainTileRows][K][kAccumulators];
  const W* w = weight + o * C;
  const int64_t whole = C / kStep * kStep;
  for (int64_t n0 = 0; n0 < N; n0 += kChainTileRows) {
    const int64_t n1 = std::min(N, n0 + kChainTileRows);
    for (int64_t c0 = 0; c0 < whole; c0 += kChainChunk<W>) {
      const int64_t c1 = std::min(whole, c0 + kChainChunk<W>);
      if (n0 == 0 && o + (kChainBlocksAhead + 1) * K <= OC)  // the same chunk of the block kChainBlocksAhead ahead
        for (int64_t k = 0; k < K; ++k)
          lanes::prefetch_l2(w + (kChainBlocksAhead * K + k) * C + c0, (c1 - c0) * int64_t{sizeof(W)});
      // Threes, and twos for the rest: four rows as two and two, since one row alone has only K chains in flight,
      // too few to cover the FMAs' latency (4 fp32 streams 174-185 tokens/s as three and one, 213-241 so).
      const int64_t threes = (n1 - n0) % 3 == 1 && n1 - n0 >= 4 ? (n1 - n0) / 3 - 1 : (n1 - n0) / 3;
      int64_t n = n0;
      for (; n < n0 + 3 * threes; n += 3) dots_chains<Format, 3, K>(acc + (n - n0), inp + n * C, w, C, c0, c1);
      for (; n + 2 <= n1; n += 2) dots_chains<Format, 2, K>(acc + (n - n0), inp + n * C, w, C, c0, c1);
      if (n < n1) dots_chains<Format, 1, K>(acc + (n - n0), inp + n * C, w, C, c0, c1);
    }
    for (int64_t n = n0; n < n1; ++n)
#pragma GCC unroll 4
      for (int64_t k = 0; k < K; ++k) {
        Lanes (&sums)[kAccumulators] = acc[n - n0][k];
        if (whole == 0)
          for (Lanes& s : sums) s = Lanes{};
        out[n * OC + o + k] =
            finish<Format>(sums, inp + n * C, w + k * C, whole, C) + (bias != nullptr ? bias[o + k] : 0.0f);
      }
  }
}

// Weight rows one input row takes side by side, for 16-bit rows of kLongRowBytes and more. AVX-512's 32
// registers hold eight rows' two accumulators; AVX2's eight rows' four spill some, and eight still streamed
// fastest (21-23 against 12-20 GB/s for two to four). SSE one row.
constexpr int64_t kWeightRowsPerPass = lanes::kLanes >= 8 ? 8 : 1;
constexpr int64_t kLongRowBytes = 8192;

// Input rows a pass over a weight row takes at most, their sums held in registers: AVX-512's 32 hold eight rows'
// two accumulators and the weights; SSE's 16 one row's eight. AVX2 takes four rows and more by dots_chains.
constexpr int64_t kRowsPerPass = lanes::kLanes == 16 ? 8 : 1;

// Where the input rows a pass takes fill L1 (Zen 4's is 32 KiB; eight rows of 1,024 channels and more), blocks of
// four input rows against three weight rows (dots_block; AVX-512's 32 registers hold their 24 accumulators). The
// 8-row fp16 gemv, one core, Zen 4: rows of 1,536 channels 12.6-12.9 against 14.2-14.8 ms, of 3,072 10.1-10.3 against
// 14.7-15.0; rows of 768 slower so (10.2-11.6 against 8.0-8.3 ms: each weight vector is widened once per four input
// rows instead of eight), which keep dots<Format, 8>. AVX2's 16 registers hold no such block.
constexpr int64_t kBlockInputRows = 4, kBlockWeightRows = lanes::kLanes == 16 ? 3 : 1;
constexpr int64_t kInputBytesInL1 = int64_t{32} << 10;

// Many input rows (a server step's prompt chunks, a short fp16 prompt): each group of kBlockWeightRows weight rows
// is widened once into fp32 (exactly) in the thread's scratch, and every block of four input rows takes it from
// there (dots_block<Fp32>), the input rows in tiles of about kInputTileBytes that stay in L2. A 16-bit weight row
// passed eight input rows at a time is widened again for each eight, and those conversions share the FMAs' two
// ports on Intel's cores: 240 rows against GPT-2's 768-channel fp16 rows ran at 22-24 GMAC/s a Xeon core eight at
// a time, 41-47 like this (a standalone loop; docs/BENCHMARKS.md). Taken where a block's widened weight rows and
// input rows fit in L1 together (rows of up to about 1,100 channels); longer rows ran slower widened (3,072
// channels: 76-80 against 65-68 ms for 64 rows on one core) and take dots_block on the 16-bit rows below. From 32
// rows: at 16, two passes of eight were faster. Each output is the same bits as its row alone:
// the products see the same fp32 weights, and dots_block keeps dots<Format, 1>'s accumulators and order.
constexpr int64_t kWidenedRowsFrom = 32;
constexpr int64_t kInputTileBytes = int64_t{1} << 20, kInputTileRows = 64;

// The calling thread's fp32 scratch of at least n floats, 64-byte aligned (unused where AVX2's and SSE's registers
// hold no blocks).
[[maybe_unused]] float* widening_scratch(int64_t n) {
  struct Scratch {
    float* p = nullptr;
    int64_t size = 0;
    ~Scratch() { std::free(p); }
  };
  thread_local Scratch scratch;
  if (scratch.size < n) {
    std::free(scratch.p);
    scratch.p = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64)));
    if (scratch.p == nullptr) throw std::bad_alloc();
    scratch.size = n;
  }
  return scratch.p;
}

// out rows [0, N) × weight rows [o0, o1) as described above; returns where the whole groups of weight rows end
// (the rest is the caller's).
template <typename Format, typename W>
int64_t widened_blocks(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C,
                       int64_t OC, int64_t o0, int64_t o1) {
  constexpr int64_t K = kBlockWeightRows, R = kBlockInputRows;
  const int64_t end = o0 + (o1 - o0) / K * K;
  const int64_t tile = std::max(kInputTileRows, kInputTileBytes / (C * int64_t{sizeof(float)}) / R * R);
  float* widened = std::is_same_v<W, float> ? nullptr : widening_scratch(K * C);
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    const int64_t n1 = std::min(N, n0 + tile), whole = n0 + (n1 - n0) / R * R;
    for (int64_t o = o0; o < end; o += K) {
      const W* w = weight + o * C;
      const float* wf;
      if constexpr (std::is_same_v<W, float>) {
        wf = w;
      } else {
        int64_t i = 0;
        for (; i + lanes::kLanes <= K * C; i += lanes::kLanes) {
          lanes::prefetch(reinterpret_cast<const char*>(w + i) + lanes::kPrefetchAhead, lanes::kLanes * sizeof(W));
          lanes::store(widened + i, Format::load(w + i));
        }
        for (; i < K * C; ++i) widened[i] = Format::widen(w[i]);
        wf = widened;
      }
      const float* b = bias != nullptr ? bias + o : nullptr;
      for (int64_t n = n0; n < whole; n += R)
        dots_block<Fp32, R, K>(out + n * OC + o, OC, inp + n * C, wf, C, b);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = whole; n < n1; ++n)
          dots<Fp32, 1, false>(out + n * OC + o + k, OC, inp + n * C, wf + k * C, C, b != nullptr ? b[k] : 0.0f);
    }
  }
  return end;
}

// Threads split the output channels (channels.h), each streams its weight rows once.
template <typename Format, typename W>
void gemv_rows(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  const bool prefetch = sizeof(W) == 2 && gemv_prefetch();
  auto channels = [&](int64_t o0, int64_t o1) {
    if constexpr (kBlockWeightRows > 1)
      if (N >= kWidenedRowsFrom && C > 0 &&
          (kBlockWeightRows + kBlockInputRows) * C * int64_t{sizeof(float)} <= kInputBytesInL1)
        o0 = widened_blocks<Format>(out, inp, weight, bias, N, C, OC, o0, o1);
    if constexpr (kWeightRowsPerPass > 1)
      if (sizeof(W) == 2 && N < 4 && C * int64_t{sizeof(W)} >= kLongRowBytes) {  // one input row, K weight rows
        int64_t o = o0;
        for (; o + kWeightRowsPerPass <= o1; o += kWeightRowsPerPass)
          for (int64_t n = 0; n < N; ++n)
            dots_across<Format, kWeightRowsPerPass>(out + n * OC + o, inp + n * C, weight + o * C, C,
                                                    bias != nullptr ? bias + o : nullptr);
        o0 = o;
      }
    if constexpr (kBlockWeightRows > 1)
      if (N >= kBlockInputRows && std::min(N, kRowsPerPass) * C * int64_t{sizeof(float)} >= kInputBytesInL1) {
        const int64_t whole = N - N % kBlockInputRows;
        int64_t o = o0;
        for (; o + kBlockWeightRows <= o1; o += kBlockWeightRows) {
          const float* b = bias != nullptr ? bias + o : nullptr;
          for (int64_t n = 0; n < whole; n += kBlockInputRows)
            dots_block<Format, kBlockInputRows, kBlockWeightRows>(out + n * OC + o, OC, inp + n * C, weight + o * C, C, b);
          for (int64_t k = 0; k < kBlockWeightRows; ++k)
            for (int64_t n = whole; n < N; ++n)
              dots<Format, 1>(out + n * OC + o + k, OC, inp + n * C, weight + (o + k) * C, C, b != nullptr ? b[k] : 0.0f);
        }
        o0 = o;
      }
    if constexpr (kChains)
      if (N >= kChainsFrom) {
        int64_t o = o0;
        for (; o + kChainWeightRows <= o1; o += kChainWeightRows)
          chains_block<Format, kChainWeightRows>(out, inp, weight, bias, N, C, OC, o);
        if (o1 - o == 2) chains_block<Format, 2>(out, inp, weight, bias, N, C, OC, o);
        if (o1 - o == 1) chains_block<Format, 1>(out, inp, weight, bias, N, C, OC, o);
        return;
      }
    for (int64_t o = o0; o < o1; ++o) {
      const W* w = weight + o * C;
      const float b = bias != nullptr ? bias[o] : 0.0f;
      int64_t n = 0;
      if (N >= 4) {  // fewer rows stream the weights faster one at a time (measured, docs/BENCHMARKS.md)
        for (; n + kRowsPerPass <= N; n += kRowsPerPass)
          dots<Format, kRowsPerPass>(out + n * OC + o, OC, inp + n * C, w, C, b);
        if constexpr (kRowsPerPass > 4)
          if (n + 4 <= N) dots<Format, 4>(out + n * OC + o, OC, inp + n * C, w, C, b), n += 4;
        if constexpr (kRowsPerPass > 2)
          if (n + 2 <= N) dots<Format, 2>(out + n * OC + o, OC, inp + n * C, w, C, b), n += 2;
      }
      for (; n < N; ++n)
        if (prefetch)
          dots<Format, 1, true>(out + n * OC + o, OC, inp + n * C, w, C, b);
        else
          dots<Format, 1, false>(out + n * OC + o, OC, inp + n * C, w, C, b);
    }
  };
  split_channels(OC, channels);
}

}  // namespace

void gemv_f32(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  gemv_rows<Fp32>(out, inp, weight, bias, N, C, OC);
}

void gemv_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
               int64_t OC) {
  gemv_rows<Bf16>(out, inp, weight, bias, N, C, OC);
}

void gemv_f16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
              int64_t OC) {
  gemv_rows<Fp16>(out, inp, weight, bias, N, C, OC);
}

}  // namespace attend::kernels::ATTEND_ISA

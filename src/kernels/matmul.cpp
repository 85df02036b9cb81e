#include "kernels/matmul.h"

#include "kernels/gemm.h"
#include "kernels/lanes.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

namespace attend::kernels {

namespace {

// Decoding multiplies one row by each weight row: a stream through the weights, bound by memory. The dot
// products use GCC's vector extension directly (lanes.h) and sum in float. Through vec::sum's double blocks
// they streamed 22 GB/s through GPT-2's 495 MB on this machine; like this, 40-48 GB/s (docs/BENCHMARKS.md).
using lanes::Lanes;
inline Lanes load(const float* p) { return lanes::load(p); }
inline Lanes load(const uint16_t* p) { return lanes::load_bf16(p); }
inline float widen(float w) { return w; }
inline float widen(uint16_t w) { return lanes::widen_bf16(w); }

// Σ_c x[c]·w[c] with the weights stored as float or bf16.
template <typename W>
[[gnu::noinline]] float dot(const float* x, const W* w, int64_t C) {
  Lanes a0 = {}, a1 = {};
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) {
    a0 += load(x + c) * load(w + c);
    a1 += load(x + c + 16) * load(w + c + 16);
  }
  float s = lanes::sum(a0 + a1);
  for (; c < C; ++c) s += x[c] * widen(w[c]);
  return s;
}

// A few rows times the weight: threads split the output channels, each streams its weight rows once.
// Each thread first takes its own contiguous share of seven eighths of the channels (one long stream),
// then the last eighth is shared in chunks of 32 as the threads free up: the cores stream at rates that
// differ from call to call, and with an even split one waited for the other for 15% of the gemv time.
// Smaller chunks restart the prefetchers' streams too often (docs/BENCHMARKS.md). Every channel is
// computed the same way whichever thread takes it, so the result does not depend on the timing.
template <typename W>
void gemv_rows(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  auto channels = [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const W* w = weight + o * C;
      for (int64_t n = 0; n < N; ++n) out[n * OC + o] = dot(inp + n * C, w, C) + (bias != nullptr ? bias[o] : 0.0f);
    }
  };
  const int threads = OC >= 512 ? num_threads() : 1;  // below 256 channels per thread, one thread is faster
  const int64_t own = OC * 7 / 8 / threads;
  constexpr int64_t kChunk = 32;
  std::atomic<int64_t> next{own * threads};
  parallel_for(threads, 1, [&](int64_t t, int64_t) {
    channels(t * own, (t + 1) * own);
    for (int64_t o; (o = next.fetch_add(kChunk, std::memory_order_relaxed)) < OC;) channels(o, std::min(OC, o + kChunk));
  });
}

}  // namespace

void matmul_forward_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  gemv_rows(out, inp, weight, bias, N, C, OC);
}

namespace {

void add_bias_rows(float* out, const float* bias, int64_t N, int64_t OC) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(float));
  });
}

template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t OC) {
  // Each thread owns a block of output channels and walks the rows: no races, fixed order.
  parallel_for(OC, 64, [&](int64_t o0, int64_t o1) {
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC;
      for (int64_t o = o0; o < o1; ++o) dbias[o] += row[o];
    }
  });
}

}  // namespace

void matmul_forward_half(Half type, float* out, const uint16_t* inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC) {
  if (bias != nullptr) add_bias_rows(out, bias, N, OC);
  gemm_half(type, false, true, N, OC, C, inp, C, weight, C, bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void matmul_backward_half(Half type, float* dinp, float* dweight, float* dbias, const float* dout,
                          const uint16_t* dout16, const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                          int64_t OC) {
  if (dinp != nullptr) gemm_half(type, false, false, N, C, OC, dout16, OC, weight, C, 1.0f, dinp, C);
  if (dweight != nullptr) gemm_half(type, true, false, OC, C, N, dout16, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (N <= kGemvRows) return gemv_rows(out, inp, weight, bias, N, C, OC);
  }
  // Start from the bias rows and let the GEMM accumulate onto them (beta = 1): one pass over `out`.
  if (bias != nullptr) {
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(T));
    });
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t C, int64_t OC) {
  if (dinp != nullptr) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
  if (dweight != nullptr) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * C, table + int64_t{ids[n]} * C, C * sizeof(T));
  });
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C) {
  parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dtable + int64_t{ids[n]} * C;
      const T* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                           \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);           \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);  \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t);                     \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels

// Decoding's matmul: one row (or a few) times each weight row, a stream through the weights bound by
// memory. The weights are fp32, bf16 or fp16; products and sums are fp32.
#include "kernels/isa/isa.h"
#include "kernels/isa/channels.h"
#include "kernels/isa/lanes.h"
#include "kernels/parallel.h"

#include <algorithm>

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

// Σ_c x[c]·w[c] with the weights stored as Format's type: 32 channels a step in 32/kLanes independent
// accumulators (two AVX-512 registers, four AVX2 ones), so that the FMAs' latency does not bound the loop.
template <typename Format, typename W>
[[gnu::noinline]] float dot(const float* x, const W* w, int64_t C) {
  constexpr int64_t kStep = 32, kAccumulators = kStep / lanes::kLanes;
  Lanes acc[kAccumulators] = {};
  int64_t c = 0;
  for (; c + kStep <= C; c += kStep)
    for (int64_t a = 0; a < kAccumulators; ++a)
      acc[a] += lanes::load(x + c + a * lanes::kLanes) * Format::load(w + c + a * lanes::kLanes);
  for (int64_t a = 1; a < kAccumulators; ++a) acc[0] += acc[a];
  float s = lanes::sum(acc[0]);
  for (; c < C; ++c) s += x[c] * Format::widen(w[c]);
  return s;
}

// Threads split the output channels (channels.h), each streams its weight rows once.
template <typename Format, typename W>
void gemv_rows(float* out, const float* inp, const W* weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  auto channels = [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const W* w = weight + o * C;
      for (int64_t n = 0; n < N; ++n)
        out[n * OC + o] = dot<Format>(inp + n * C, w, C) + (bias != nullptr ? bias[o] : 0.0f);
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

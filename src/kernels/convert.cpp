#include "kernels/convert.h"

#include <cstring>

#include "kernels/parallel.h"

#include <cmath>

namespace attend::kernels {

// GCC 12 has _Float16 on x86-64; with -mf16c (implied by -march=native here) the conversions compile to
// vcvtps2ph / vcvtph2ps, otherwise to a correct software routine.
void float_to_half(uint16_t* out, const float* inp, int64_t n) {
  parallel_for(n, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      _Float16 h = static_cast<_Float16>(inp[i]);
      __builtin_memcpy(&out[i], &h, sizeof(h));
    }
  });
}

void half_to_float(float* out, const uint16_t* inp, int64_t n) {
  parallel_for(n, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      _Float16 h;
      __builtin_memcpy(&h, &inp[i], sizeof(h));
      out[i] = static_cast<float>(h);
    }
  });
}

void quantize_rows_int8(int8_t* out, float* scales, const float* inp, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      float amax = 0.0f;
      for (int64_t c = 0; c < C; ++c) amax = std::fmax(amax, std::fabs(x[c]));
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t c = 0; c < C; ++c) out[n * C + c] = static_cast<int8_t>(std::lrintf(x[c] * inv));
      scales[n] = scale;
    }
  });
}

void dequantize_rows_int8(float* out, const int8_t* inp, const float* scales, int64_t N, int64_t C) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t c = 0; c < C; ++c) out[n * C + c] = static_cast<float>(inp[n * C + c]) * scales[n];
  });
}

void float_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  // Branch-free so that it vectorises: round to nearest even by adding 0x7FFF plus the kept part's lowest bit;
  // a NaN keeps its top bits and is made quiet (rounding could otherwise carry it into infinity).
  parallel_for(n, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      uint32_t bits;
      std::memcpy(&bits, inp + i, 4);
      const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
      const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      out[i] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x40u : rounded);
    }
  });
}

void bf16_to_float(float* out, const uint16_t* inp, int64_t n) {
  parallel_for(n, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint32_t bits = uint32_t{inp[i]} << 16;
      std::memcpy(out + i, &bits, 4);
    }
  });
}

void round_to_half(Half type, uint16_t* out, const float* inp, int64_t n) {
  if (type == Half::BF16)
    float_to_bf16(out, inp, n);
  else
    float_to_half(out, inp, n);
}

}  // namespace attend::kernels

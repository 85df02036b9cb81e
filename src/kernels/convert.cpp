#include "kernels/convert.h"

#include "kernels/parallel.h"

#include <cmath>

namespace attend::kernels {

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

void round_to_half(Half type, uint16_t* out, const float* inp, int64_t n) {
  if (type == Half::BF16)
    float_to_bf16(out, inp, n);
  else
    float_to_half(out, inp, n);
}

void widen_half(Half type, float* out, const uint16_t* inp, int64_t n) {
  if (type == Half::BF16)
    bf16_to_float(out, inp, n);
  else
    half_to_float(out, inp, n);
}

}  // namespace attend::kernels

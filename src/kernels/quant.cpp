#include "kernels/quant.h"

#include "kernels/convert.h"
#include "kernels/half_bits.h"
#include "kernels/quant_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attend::kernels {
namespace {

constexpr QuantFormat kFormats[] = {
    {"q8_0", 32, 34}, {"q4_0", 32, 18}, {"q4_1", 32, 20}, {"q5_0", 32, 22}, {"q5_1", 32, 24},
    {"q4_k", 256, 144}, {"q5_k", 256, 176}, {"q6_k", 256, 210}, {"q8_k", 256, 292},
};

float from_half(uint16_t h) { return half_bits::widen_f16_bits(h); }  // a block's scale: inline, exactly
uint16_t to_half(float f) {
  uint16_t h;
  float_to_half(&h, &f, 1);
  return h;
}
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
void store_u16(uint8_t* p, uint16_t v) { p[0] = static_cast<uint8_t>(v), p[1] = static_cast<uint8_t>(v >> 8); }

// ---- fitting one group of values ------------------------------------------------------------------
//
// Both fits try a fan of candidate scales around the one that maps the extreme value to the extreme level, round
// every value at each, and keep the candidate whose least-squares scale (and offset) leaves the smallest weighted
// error. The rounding decides the error far more than the scale, so a few dozen candidates find better blocks
// than the single scale of max / levels.

// The value of largest magnitude, with its sign (0 for a block of zeros).
float signed_extreme(const float* x, int n) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  return max;
}

// x ≈ d·q with q ∈ [lo, hi] (lo = −hi − 1: the extreme value goes to the side with the extra level). Returns d.
// The candidates in llama-quantize's order (make_qx_quants): the extreme value on the extreme level (k = 0), then
// k = −nsteps .. nsteps; each takes its least-squares d, and the one explaining most of Σw·x² (d·Σwxq, the least
// weighted error) is kept. The sums are fp64 (llama-quantize's fp32 sums can pick another of two near-equal
// candidates).
float fit_symmetric(const float* x, const float* w, int n, int lo, int hi, int nsteps, int8_t* q) {
  const float max = signed_extreme(x, n);
  if (max == 0) {
    std::fill(q, q + n, int8_t{0});
    return 0;
  }
  // The extreme value at the extreme level: the answer when the weights leave nothing to fit.
  float best_d = max / static_cast<float>(lo);
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[i] / best_d)), lo, hi));
  double best = 0;  // d·Σwxq of the kept candidate
  bool kept = false;
  int8_t trial[256];
  auto candidate = [&](int k) {
    const float iscale = (static_cast<float>(lo) + 0.1f * static_cast<float>(k)) / max;
    double sxq = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
      const int v = std::clamp(static_cast<int>(std::nearbyint(iscale * x[i])), lo, hi);
      trial[i] = static_cast<int8_t>(v);
      sxq += static_cast<double>(w[i]) * x[i] * v;
      sqq += static_cast<double>(w[i]) * v * v;
    }
    if (sqq > 0 && (!kept || sxq * sxq > best * sqq)) {
      const double d = sxq / sqq;
      best = d * sxq, best_d = static_cast<float>(d), kept = true;
      std::memcpy(q, trial, static_cast<size_t>(n));
    }
  };
  candidate(0);
  for (int k = -nsteps; k <= nsteps; ++k)
    if (k != 0) candidate(k);
  return best_d;
}

// x ≈ d·q with q ∈ [lo, hi] as above, but the extreme value always exactly on a level: the candidate scales put it
// on lo, lo + 1, ... lo + nsteps (no least-squares refit, which would move it), and the one of least weighted error
// wins. Q4_0 and Q5_0 take this: on a trained GPT (the Brown GPT at Q4_0, nine equivalent versions of it, see
// docs/BENCHMARKS.md) the free least-squares fit left 7% less KL divergence than llama-quantize's plain rule but
// raised perplexity by 0.10 more on average; with each block's extreme kept exact, the divergence stays 2% below the
// plain rule's and the perplexity rise is the plain rule's (−0.013 ± 0.049 apart).
float fit_symmetric_exact_extreme(const float* x, const float* w, int n, int lo, int hi, int nsteps, int8_t* q) {
  const float max = signed_extreme(x, n);
  if (max == 0) {
    std::fill(q, q + n, int8_t{0});
    return 0;
  }
  float best_d = 0;
  double best_err = INFINITY;
  int8_t trial[256];
  for (int k = 0; k <= nsteps; ++k) {
    const float d = max / static_cast<float>(lo + k), id = 1 / d;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const int v = std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), lo, hi);
      trial[i] = static_cast<int8_t>(v);
      const double e = x[i] - static_cast<double>(d) * v;
      err += w[i] * e * e;
    }
    if (err < best_err) {
      best_err = err, best_d = d;
      std::memcpy(q, trial, static_cast<size_t>(n));
    }
  }
  return best_d;
}

// x ≈ d·q + m with q ∈ [0, nmax]; with nonpositive_min, m ≤ 0 (the K types store −m / dmin unsigned). The
// candidates: the range's own scale (max − min) / nmax with m = min, then scales (max − m) / (nmax + first +
// 0.1·k) for k = 0 .. steps, each rounding x − m and taking its least-squares d and m, where m is the offset of the
// best candidate so far: each better fit moves the origin the next ones round from, as llama-quantize's search
// (make_qkx2_quants) does. The sums are fp64.
void fit_asymmetric(const float* x, const float* w, int n, int nmax, bool nonpositive_min, float first, int steps,
                    float* d_out, float* m_out, uint8_t* q) {
  float lo = x[0], hi = x[0];
  double sw = 0, sx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    sw += w[i], sx += static_cast<double>(w[i]) * x[i];
  }
  if (nonpositive_min) lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(q, q + n, uint8_t{0});
    *d_out = 0, *m_out = lo;
    return;
  }
  const float range_iscale = static_cast<float>(nmax) / (hi - lo);
  *d_out = 1 / range_iscale, *m_out = lo;
  double best_err = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint(range_iscale * (x[i] - lo))), 0, nmax));
    const double e = static_cast<double>(*d_out) * q[i] + lo - x[i];
    best_err += static_cast<double>(w[i]) * (e * e);
  }
  uint8_t trial[256];
  for (int k = 0; k <= steps; ++k) {
    const float origin = *m_out;
    const float iscale = (first + 0.1f * static_cast<float>(k) + static_cast<float>(nmax)) / (hi - origin);
    double sq = 0, sqq = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      const int v = std::clamp(static_cast<int>(std::nearbyint(iscale * (x[i] - origin))), 0, nmax);
      trial[i] = static_cast<uint8_t>(v);
      sq += static_cast<double>(w[i]) * v, sqq += static_cast<double>(w[i]) * v * v, sxq += static_cast<double>(w[i]) * v * x[i];
    }
    const double det = sw * sqq - sq * sq;
    if (det <= 0) continue;
    double d = (sw * sxq - sx * sq) / det, m = (sqq * sx - sq * sxq) / det;
    if (nonpositive_min && m > 0) m = 0, d = sxq / sqq;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = d * trial[i] + m - x[i];
      err += static_cast<double>(w[i]) * (e * e);
    }
    if (err < best_err) {
      best_err = err, *d_out = static_cast<float>(d), *m_out = static_cast<float>(m);
      std::memcpy(q, trial, static_cast<size_t>(n));
    }
  }
}

// The weights of a group's values: importance·√(σ² + x²) with an importance, else `flat` ? 1 : σ + |x|.
void value_weights(float* w, const float* x, int n, const float* importance, float sigma2, bool flat) {
  for (int i = 0; i < n; ++i) {
    if (importance != nullptr)
      w[i] = importance[i] * std::sqrt(sigma2 + x[i] * x[i]);
    else
      w[i] = flat ? 1.0f : std::sqrt(sigma2) + std::fabs(x[i]);
  }
}
float mean_square(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(s / n);
}
int round_clamp(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi); }

// ---- the 32-value types ---------------------------------------------------------------------------

void quantize_q8_0(uint8_t* b, const float* x) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127, id = d != 0 ? 1 / d : 0;
  store_u16(b, to_half(d));
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[i] * id)));
}

// Q4_0 (bits 4) and Q5_0 (bits 5): d·(q − 2^(bits−1)).
void quantize_symmetric_32(uint8_t* b, const float* x, const float* importance, int bits) {
  const int half = 1 << (bits - 1);
  float w[32];
  value_weights(w, x, 32, importance, mean_square(x, 32), true);
  int8_t q[32];
  const float d = fit_symmetric_exact_extreme(x, w, 32, -half, half - 1, 3, q);
  store_u16(b, to_half(d));
  uint8_t* qs = b + 2;
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(((q[j] + half) >> 4) & 1) << j;
    for (int k = 0; k < 4; ++k) qs[k] = static_cast<uint8_t>(qh >> (8 * k));
    qs += 4;
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(((q[j] + half) & 15) | ((q[j + 16] + half) & 15) << 4);
}

// Q4_1 (bits 4) and Q5_1 (bits 5): d·q + m.
void quantize_asymmetric_32(uint8_t* b, const float* x, const float* importance, int bits) {
  float w[32];
  value_weights(w, x, 32, importance, mean_square(x, 32), true);
  uint8_t q[32];
  float d, m;
  fit_asymmetric(x, w, 32, (1 << bits) - 1, false, -1.0f, 20, &d, &m, q);
  store_u16(b, to_half(d));
  store_u16(b + 2, to_half(m));
  uint8_t* qs = b + 4;
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(q[j] >> 4 & 1) << j;
    for (int k = 0; k < 4; ++k) qs[k] = static_cast<uint8_t>(qh >> (8 * k));
    qs += 4;
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
}

// One block of a 32-value type; each its own loops over the block (that the compiler vectorizes), the type
// chosen once per row.
void dequantize_q8_0(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b));
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}
void dequantize_q4_0(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b));
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>((b[2 + j] & 15) - 8) * d;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
}
void dequantize_q4_1(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b)), m = from_half(load_u16(b + 2));
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>(b[4 + j] & 15) * d + m;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
}
// Q5_0 (offset false: q − 16) and Q5_1 (q·d + m): the fifth bits in a 32-bit word.
template <bool offset>
void dequantize_q5(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b)), m = offset ? from_half(load_u16(b + 2)) : 0.0f;
  const uint8_t* h = b + (offset ? 4 : 2);
  const uint32_t qh = h[0] | h[1] << 8 | h[2] << 16 | static_cast<uint32_t>(h[3]) << 24;
  const uint8_t* qs = h + 4;
  const int zero = offset ? 0 : 16;
  for (int j = 0; j < 16; ++j)
    y[j] = static_cast<float>(static_cast<int>((qs[j] & 15) | ((qh >> j) & 1) << 4) - zero) * d + m;
  for (int j = 0; j < 16; ++j)
    y[j + 16] = static_cast<float>(static_cast<int>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - zero) * d + m;
}

// ---- the K types (256 values) ----------------------------------------------------------------------

using quant_layout::scale_min_k4;

// The inverse of scale_min_k4 for all eight sub-blocks.
void pack_scale_min_k4(uint8_t* s, const int* sc, const int* m) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] |= static_cast<uint8_t>(sc[j]), s[j + 4] |= static_cast<uint8_t>(m[j]);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 15) | (m[j] & 15) << 4);
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// Q4_K (bits 4) and Q5_K (bits 5): eight sub-blocks of 32, each x ≈ (d·sc)·q − dmin·m.
void quantize_k(uint8_t* b, const float* x, const float* importance, int bits) {
  const int nmax = (1 << bits) - 1;
  const float sigma2 = importance != nullptr ? mean_square(x, 256) : 0.0f;  // the row's, for the importance weights
  float scales[8], mins[8], w[32];
  uint8_t q[256];
  // Without an importance, llama-quantize's fit: each sub-block's values weigh σ_j + |x| (σ_j its own root mean
  // square), the fan of scales runs from nmax − 1 to nmax + 1 levels over the range for Q4_K, from nmax − 0.5 to
  // nmax + 1 for Q5_K, and each better candidate moves the origin the next ones round from (fit_asymmetric); both
  // tools then write the same blocks but for about 1%, where llama.cpp's fp32 sums pick another of two near-equal
  // candidates. Attend's own search (the row's σ, a fixed origin) left a 3% smaller KL divergence but a larger
  // perplexity rise on the Brown GPT's Q5_K_M (+0.045 ± 0.026 over nine equivalent versions of the model; this fit:
  // level, docs/BENCHMARKS.md). With an importance the weights are the calibration's and the row's σ.
  const float first = bits == 5 ? -0.5f : -1.0f;
  const int steps = bits == 5 ? 15 : 20;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    value_weights(w, xj, 32, importance ? importance + 32 * j : nullptr, importance ? sigma2 : mean_square(xj, 32), false);
    float d, m;
    fit_asymmetric(xj, w, 32, nmax, true, first, steps, &d, &m, q + 32 * j);
    scales[j] = std::max(d, 0.0f), mins[j] = -m;  // m ≤ 0
  }
  const float max_scale = *std::max_element(scales, scales + 8), max_min = *std::max_element(mins, mins + 8);
  const uint16_t d16 = to_half(max_scale / 63), dmin16 = to_half(max_min / 63);
  const float d = from_half(d16), dmin = from_half(dmin16);
  int sc[8], mi[8];
  const float inv_scale = max_scale > 0 ? 63 / max_scale : 0, inv_min = max_min > 0 ? 63 / max_min : 0;
  for (int j = 0; j < 8; ++j) {
    sc[j] = round_clamp(inv_scale * scales[j], 0, 63);
    mi[j] = round_clamp(inv_min * mins[j], 0, 63);
  }
  store_u16(b, d16);
  store_u16(b + 2, dmin16);
  pack_scale_min_k4(b + 4, sc, mi);
  // Every value again with the scales as stored.
  for (int j = 0; j < 8; ++j) {
    const float dj = d * static_cast<float>(sc[j]), mj = dmin * static_cast<float>(mi[j]);
    for (int i = 0; i < 32; ++i)
      q[32 * j + i] = static_cast<uint8_t>(dj > 0 ? round_clamp((x[32 * j + i] + mj) / dj, 0, nmax) : 0);
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = bits == 5 ? b + 48 : b + 16;
  if (bits == 5) std::memset(qh, 0, 32);
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * i + l], hi = q[64 * i + 32 + l];
      qs[32 * i + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
      if (bits == 5) qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * i) | (hi >> 4) << (2 * i + 1));
    }
}

template <int bits>
void dequantize_k(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b)), dmin = from_half(load_u16(b + 2));
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = bits == 5 ? b + 48 : b + 16;
  for (int i = 0; i < 4; ++i) {
    int sc, m;
    scale_min_k4(s, 2 * i, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(s, 2 * i + 1, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * i + l] & 15, hi = qs[32 * i + l] >> 4;
      if (bits == 5) lo += (qh[l] >> (2 * i) & 1) << 4, hi += (qh[l] >> (2 * i + 1) & 1) << 4;
      y[64 * i + l] = d1 * static_cast<float>(lo) - m1;
      y[64 * i + 32 + l] = d2 * static_cast<float>(hi) - m2;
    }
  }
}

// Q6_K: sixteen sub-blocks of 16, x ≈ (d·sc)·(q − 32), sc int8.
void quantize_q6_k(uint8_t* b, const float* x, const float* importance) {
  const float sigma2 = importance != nullptr ? mean_square(x, 256) : 0.0f;  // the row's, for the importance weights
  float scales[16], w[16];
  int8_t q[256];
  float max_scale = 0, amax_scale = 0;
  for (int j = 0; j < 16; ++j) {
    if (importance != nullptr)
      value_weights(w, x + 16 * j, 16, importance + 16 * j, sigma2, false);
    else  // llama-quantize's weights, x² (quantize_k says why its fits are followed)
      for (int i = 0; i < 16; ++i) w[i] = x[16 * j + i] * x[16 * j + i];
    scales[j] = fit_symmetric(x + 16 * j, w, 16, -32, 31, 9, q + 16 * j);
    if (std::fabs(scales[j]) > amax_scale) amax_scale = std::fabs(scales[j]), max_scale = scales[j];
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  if (amax_scale == 0) {
    std::memset(b, 0, 210);
    for (int l = 0; l < 64; ++l) qh[l] = 0xAA;  // every q = 32 (low nibbles 0, top bits 2): zero
    return;
  }
  const float iscale = -128 / max_scale;
  const uint16_t d16 = to_half(1 / iscale);
  const float d = from_half(d16);
  for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(round_clamp(iscale * scales[j], -128, 127));
  store_u16(b + 208, d16);
  uint8_t u[256];  // q + 32 with the stored scales
  for (int j = 0; j < 16; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    for (int i = 0; i < 16; ++i)
      u[16 * j + i] = static_cast<uint8_t>((dj != 0 ? round_clamp(x[16 * j + i] / dj, -32, 31) : 0) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* v = u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[64 * h + l] = static_cast<uint8_t>((v[l] & 15) | (v[l + 64] & 15) << 4);
      ql[64 * h + 32 + l] = static_cast<uint8_t>((v[l + 32] & 15) | (v[l + 96] & 15) << 4);
      qh[32 * h + l] = static_cast<uint8_t>(v[l] >> 4 | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
    }
  }
}

void dequantize_q6_k(float* __restrict y, const uint8_t* __restrict b) {
  const float d = from_half(load_u16(b + 208));
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* s = sc + 8 * h;
    float* out = y + 128 * h;
    for (int half = 0; half < 2; ++half) {  // values l of [16·half, 16·half + 16) share their four scales
      const float d1 = d * static_cast<float>(s[half]), d2 = d * static_cast<float>(s[half + 2]);
      const float d3 = d * static_cast<float>(s[half + 4]), d4 = d * static_cast<float>(s[half + 6]);
      for (int l = 16 * half; l < 16 * half + 16; ++l) {
        out[l] = d1 * static_cast<float>(((ql[l] & 15) | (qh[l] & 3) << 4) - 32);
        out[l + 32] = d2 * static_cast<float>(((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32);
        out[l + 64] = d3 * static_cast<float>(((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
        out[l + 96] = d4 * static_cast<float>(((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32);
      }
    }
  }
}

// Q8_K: d (fp32) then 256 int8 then 16 int16 sums.
void quantize_q8_k(uint8_t* b, const float* x) {
  float max = 0, amax = 0;
  for (int i = 0; i < 256; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  auto* q = reinterpret_cast<int8_t*>(b + 4);
  int16_t sums[16] = {};
  float d = 0;
  if (amax != 0) {
    const float iscale = -127 / max;
    for (int i = 0; i < 256; ++i) q[i] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * x[i]))));
    for (int i = 0; i < 256; ++i) sums[i / 16] = static_cast<int16_t>(sums[i / 16] + q[i]);
    d = 1 / iscale;
  } else {
    std::memset(q, 0, 256);
  }
  std::memcpy(b, &d, 4);
  std::memcpy(b + 260, sums, 32);
}

void dequantize_q8_k(float* __restrict y, const uint8_t* __restrict b) {
  float d;
  std::memcpy(&d, b, 4);
  for (int i = 0; i < 256; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[4 + i]));
}

}  // namespace

const QuantFormat& quant_format(QuantType type) { return kFormats[static_cast<int>(type)]; }

int64_t quant_row_bytes(QuantType type, int64_t n) {
  const QuantFormat& f = quant_format(type);
  return n / f.block * f.bytes;
}

void quantize_row(QuantType type, void* blocks, const float* x, int64_t n, const float* importance) {
  const QuantFormat& f = quant_format(type);
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < n / f.block; ++i, b += f.bytes, x += f.block) {
    const float* imp = importance ? importance + i * f.block : nullptr;
    switch (type) {
      case QuantType::Q8_0: quantize_q8_0(b, x); break;
      case QuantType::Q4_0: quantize_symmetric_32(b, x, imp, 4); break;
      case QuantType::Q5_0: quantize_symmetric_32(b, x, imp, 5); break;
      case QuantType::Q4_1: quantize_asymmetric_32(b, x, imp, 4); break;
      case QuantType::Q5_1: quantize_asymmetric_32(b, x, imp, 5); break;
      case QuantType::Q4_K: quantize_k(b, x, imp, 4); break;
      case QuantType::Q5_K: quantize_k(b, x, imp, 5); break;
      case QuantType::Q6_K: quantize_q6_k(b, x, imp); break;
      case QuantType::Q8_K: quantize_q8_k(b, x); break;
    }
  }
}

void dequantize_row(QuantType type, float* out, const void* blocks, int64_t n) {
  const QuantFormat& f = quant_format(type);
  const auto* b = static_cast<const uint8_t*>(blocks);
  auto each = [&](auto block) {
    for (int64_t i = 0; i < n / f.block; ++i, b += f.bytes, out += f.block) block(out, b);
  };
  switch (type) {
    case QuantType::Q8_0: return each(dequantize_q8_0);
    case QuantType::Q4_0: return each(dequantize_q4_0);
    case QuantType::Q4_1: return each(dequantize_q4_1);
    case QuantType::Q5_0: return each(dequantize_q5<false>);
    case QuantType::Q5_1: return each(dequantize_q5<true>);
    case QuantType::Q4_K: return each(dequantize_k<4>);
    case QuantType::Q5_K: return each(dequantize_k<5>);
    case QuantType::Q6_K: return each(dequantize_q6_k);
    case QuantType::Q8_K: return each(dequantize_q8_k);
  }
}

namespace {

// Q4_0's and Q8_0's repacking (quant.h): blocks of `block_bytes`, an fp16 scale and (block_bytes − 2) / word
// words of `word` bytes, each row's word m going to place r of the group's word m (8 · word bytes), every byte
// xor `flip` (Q8_0's int8 values as the unsigned bytes w + 128).
int64_t x8_bytes(int64_t rows, int64_t n, int64_t block_bytes) { return rows / 8 * (n / 32) * 8 * block_bytes; }

void repack_x8(uint8_t* out, const void* blocks, int64_t rows, int64_t n, int64_t block_bytes, int64_t word,
               uint8_t flip) {
  const auto* in = static_cast<const uint8_t*>(blocks);
  const int64_t per_row = n / 32, row_bytes = per_row * block_bytes, words = (block_bytes - 2) / word;
  for (int64_t g = 0; g < rows / 8; ++g)
    for (int64_t b = 0; b < per_row; ++b, out += 8 * block_bytes)
      for (int r = 0; r < 8; ++r) {
        const uint8_t* block = in + (8 * g + r) * row_bytes + block_bytes * b;
        std::memcpy(out + 2 * r, block, 2);  // the scale
        for (int64_t m = 0; m < words; ++m)
          for (int64_t i = 0; i < word; ++i) out[16 + 8 * word * m + word * r + i] = block[2 + word * m + i] ^ flip;
      }
}

}  // namespace

int64_t q4_0x8_bytes(int64_t rows, int64_t n) { return x8_bytes(rows, n, 18); }
void repack_q4_0x8(uint8_t* out, const void* blocks, int64_t rows, int64_t n) { repack_x8(out, blocks, rows, n, 18, 4, 0); }
int64_t q8_0x8_bytes(int64_t rows, int64_t n) { return x8_bytes(rows, n, 34); }
void repack_q8_0x8(uint8_t* out, const void* blocks, int64_t rows, int64_t n) { repack_x8(out, blocks, rows, n, 34, 8, 0x80); }

double quant_dot_reference(QuantType type, const void* blocks, const float* x, int64_t n) {
  const QuantFormat& f = quant_format(type);
  const auto* b = static_cast<const uint8_t*>(blocks);
  float y[256];
  double sum = 0;
  for (int64_t i = 0; i < n / f.block; ++i, b += f.bytes) {
    dequantize_row(type, y, b, f.block);
    for (int64_t j = 0; j < f.block; ++j) sum += static_cast<double>(y[j]) * x[i * f.block + j];
  }
  return sum;
}

}  // namespace attend::kernels

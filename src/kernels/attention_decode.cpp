// Decoding's attention: one new query per sequence against its KV cache, read in the type the cache
// stores (fp32, fp16, or int8 with row scales). A generated token's attention reads every cached row of
// every layer once, so at long contexts the cache's bytes add to the weights' bytes per token; reading
// fp16 rows in place halves them, and needs no fp32 copy of the cache.
#include "kernels/attention.h"
#include "kernels/attention_scores.h"
#include "kernels/lanes.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace attend::kernels {
namespace {

// 16 channels at a time (lanes.h): fp16 widens with vcvtph2ps, int8 with vpmovsxbd + vcvtdq2ps (its row
// scale is applied once per row).
using lanes::kLanes;
using lanes::Lanes;
inline Lanes load(const float* p) { return lanes::load(p); }
inline Lanes load(const uint16_t* p) { return lanes::load_f16(p); }
inline Lanes load(const int8_t* p) { return lanes::load(p); }
inline float widen(float x) { return x; }
inline float widen(uint16_t bits) { return lanes::widen_f16(bits); }
inline float widen(int8_t x) { return static_cast<float>(x); }

// q·k over D channels.
template <typename KV>
inline float dot(const float* q, const KV* k, int64_t D) {
  Lanes acc = {};
  int64_t d = 0;
  for (; d + kLanes <= D; d += kLanes) acc += load(q + d) * load(k + d);
  float s = lanes::sum(acc);
  for (; d < D; ++d) s += q[d] * widen(k[d]);
  return s;
}

// o += w·v over D channels.
template <typename KV>
inline void axpy(float* o, float w, const KV* v, int64_t D) {
  int64_t d = 0;
  for (; d + kLanes <= D; d += kLanes) {
    const Lanes sum = load(o + d) + w * load(v + d);
    std::memcpy(o + d, &sum, sizeof sum);
  }
  for (; d < D; ++d) o[d] += w * widen(v[d]);
}

// softmax(s[0..n)) in place; false (and s untouched) when every score is masked.
[[gnu::noinline]] bool softmax_row(float* s, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  if (mx == -std::numeric_limits<float>::infinity()) return false;
  const double total = vec::sum<float>(n, [&](int64_t j) { return s[j] = vec::exp(s[j] - mx); });
  const float inv = static_cast<float>(1.0 / total);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  return true;
}

int64_t per_thread_size(const AttentionParams<float>& p) { return p.group_size() * p.Tk; }

}  // namespace

int64_t decode_attention_workspace_size(const AttentionParams<float>& p, int threads) {
  return threads * per_thread_size(p) + detail::t5_bucket_table_size(p);  // int32 buckets fit in floats
}

template <typename KV>
void decode_attention_forward(float* out, const float* q, const KV* k, const KV* v, const float* k_scales,
                              const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, G = p.group_size(), Tk = p.Tk;
  const int64_t rows = p.kv_rows();
  const float scale = static_cast<float>(p.scale);
  int32_t* buckets = reinterpret_cast<int32_t*>(workspace + num_threads() * per_thread_size(p));
  detail::fill_t5_buckets(buckets, p);

  parallel_for(p.B * Hkv, 1, [&](int64_t w0, int64_t w1) {
    float* scores = workspace + thread_index() * per_thread_size(p);  // (G, Tk): the group's score rows
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w / Hkv, kvh = w % Hkv, h0 = kvh * G;  // the group's heads are h0 .. h0 + G − 1
      const float* Q = q + (b * H + h0) * D;
      float* O = out + (b * H + h0) * D;
      std::fill_n(O, G * D, 0.0f);
      // Keys past the causal diagonal or the sequence's length are never read.
      int64_t end = Tk;
      if (p.causal) end = std::min(end, p.q_offset + 1);
      if (p.key_lengths != nullptr) end = std::min<int64_t>(end, p.key_lengths[b]);
      if (end <= 0) continue;
      const int64_t first_row = b * rows * Hkv + kvh;  // (b, position 0, kvh); positions are Hkv rows apart
      for (int64_t j = 0; j < end; ++j) {
        const int64_t r = first_row + j * Hkv;
        const float row_scale = k_scales != nullptr ? scale * k_scales[r] : scale;
        for (int64_t g = 0; g < G; ++g) scores[g * Tk + j] = row_scale * dot(Q + g * D, k + r * D, D);
      }
      bool any_visible = false;
      for (int64_t g = 0; g < G; ++g) {
        float* s = scores + g * Tk;
        if (!detail::tile_is_plain(p, b, 0, 1, 0, end)) detail::bias_and_mask(s, Tk, p, buckets, b, h0 + g, 0, 1, 0, end);
        if (softmax_row(s, end)) any_visible = true;
        else std::fill_n(s, end, 0.0f);  // every key masked: the output stays zero
      }
      if (!any_visible) continue;
      for (int64_t j = 0; j < end; ++j) {
        const int64_t r = first_row + j * Hkv;
        const float row_scale = v_scales != nullptr ? v_scales[r] : 1.0f;
        for (int64_t g = 0; g < G; ++g) axpy(O + g * D, scores[g * Tk + j] * row_scale, v + r * D, D);
      }
    }
  });
}

template void decode_attention_forward<float>(float*, const float*, const float*, const float*, const float*,
                                              const float*, const AttentionParams<float>&, float*);
template void decode_attention_forward<uint16_t>(float*, const float*, const uint16_t*, const uint16_t*, const float*,
                                                 const float*, const AttentionParams<float>&, float*);
template void decode_attention_forward<int8_t>(float*, const float*, const int8_t*, const int8_t*, const float*,
                                               const float*, const AttentionParams<float>&, float*);

}  // namespace attend::kernels

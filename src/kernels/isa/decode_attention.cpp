// Decoding's attention: one new query per sequence against its KV cache, read in the type the cache
// stores (fp32, fp16, or int8 with row scales). A generated token's attention reads every cached row of
// every layer once, so at long contexts the cache's bytes add to the weights' bytes per token; reading
// fp16 rows in place halves them, and needs no fp32 copy of the cache.
#include "kernels/isa/isa.h"
#include "kernels/attention_scores.h"
#include "kernels/decode_attention_layout.h"
#include "kernels/isa/lanes.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace attend::kernels::ATTEND_ISA {
namespace {

// One register of channels at a time (lanes.h): fp16 widens with vcvtph2ps, int8 with vpmovsxbd + vcvtdq2ps (its row
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
  // The tail starts at D rounded down, not where the vector loop stopped: with D known (64, 128) GCC then sees
  // an empty loop instead of warning about one it cannot bound.
  const int64_t whole = D - D % kLanes;
  Lanes acc = {};
  for (int64_t d = 0; d < whole; d += kLanes) acc += load(q + d) * load(k + d);
  float s = lanes::sum(acc);
  for (int64_t d = whole; d < D; ++d) s += q[d] * widen(k[d]);
  return s;
}

// o += w·v over D channels.
template <typename KV>
inline void axpy(float* o, float w, const KV* v, int64_t D) {
  const int64_t whole = D - D % kLanes;
  for (int64_t d = 0; d < whole; d += kLanes) lanes::store(o + d, load(o + d) + w * load(v + d));
  for (int64_t d = whole; d < D; ++d) o[d] += w * widen(v[d]);
}

using namespace decode_layout;

}  // namespace

// Split-K decoding (flash-decoding): the visible keys of each sequence are cut into blocks of kBlock
// positions, and the threads share the blocks. A block reads its positions' rows whole, every head of a
// position at once, so each thread streams the cache in the order it is stored (reading one head's rows
// across positions touches a new 4 KiB page every few rows, which the hardware prefetchers do not follow:
// that ran at 5 GB/s). Each block keeps its own max and sum, and the blocks merge as in the tiled kernel:
// out = Σ_blocks e^{m_b − m}·O_b / Σ_blocks e^{m_b − m}·l_b.
//
// kD is the head size when it is known at compile time (64 and 128, the common ones), 0 otherwise. With it
// the per-head loops unroll: the kernel is nearly bound by its arithmetic (rows already in L2 read at only
// 19 GB/s on one thread), and unrolled it is 5% faster there and from memory.
namespace {

template <int64_t kD, typename KV>
void decode_attention(float* out, const float* q, const KV* k, const KV* v, const float* k_scales,
                      const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = kD > 0 ? kD : p.d_head, G = p.group_size();
  const int64_t rows = p.kv_rows(), n_blocks = blocks(p), stride = partial_size(p);
  const float scale = static_cast<float>(p.scale);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  float* partials = workspace + num_threads() * scores_size(p);  // (B, n_blocks, H, stride), line-aligned
  partials += (kLineFloats - reinterpret_cast<uintptr_t>(partials) / sizeof(float) % kLineFloats) % kLineFloats;
  int32_t* buckets = reinterpret_cast<int32_t*>(partials + p.B * n_blocks * H * stride);
  detail::fill_t5_buckets(buckets, p);

  // Keys past the causal diagonal or the sequence's length, or older than a sliding window, are never read.
  auto visible_end = [&](int64_t b) {
    int64_t end = p.Tk;
    if (p.causal) end = std::min(end, p.q_offset + 1);
    if (p.key_lengths != nullptr) end = std::min<int64_t>(end, p.key_lengths[b]);
    return end;
  };
  // The threads share the (sequence, block) items that hold a visible key, in equal counts. Split over every
  // item, sequences of different lengths (a server's) left one thread with the long ones' blocks and the other
  // with the short ones' empty blocks. The others get l = 0 (nothing visible) for the merge.
  const int64_t first = detail::first_visible_key(p, 0);
  thread_local std::vector<int64_t> items;
  items.clear();
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t end = visible_end(b);
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      if (std::max(blk * kBlock, first) < std::min(blk * kBlock + kBlock, end))
        items.push_back(b * n_blocks + blk);
      else
        for (int64_t h = 0; h < H; ++h) partials[(b * n_blocks + blk) * H * stride + h * stride + D + 1] = 0.0f;
    }
  }
  const int64_t* item = items.data();
  parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t i0, int64_t i1) {
    float* scores = workspace + thread_index() * scores_size(p);  // (H, kBlock)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t w = item[i], b = w / n_blocks;
      float* part = partials + w * H * stride;
      const int64_t j0 = std::max((w % n_blocks) * kBlock, first);
      const int64_t j1 = std::min((w % n_blocks) * kBlock + kBlock, visible_end(b));
      for (int64_t h = 0; h < H; ++h) part[h * stride + D + 1] = 0.0f;  // l = 0 until a head sees a key
      // Row (b, j, kvh) is at (b·rows + j)·Hkv + kvh: a position's heads are adjacent. A paged cache's block
      // lies `shift` positions further.
      const int64_t blk = w % n_blocks;
      const int64_t shift =
          p.block_table != nullptr
              ? (static_cast<int64_t>(p.block_table[b * p.block_table_stride + blk]) - blk) * kBlock - b * rows
              : 0;
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
          const int64_t r = (b * rows + j + shift) * Hkv + kvh;
          const float row_scale = k_scales != nullptr ? scale * k_scales[r] : scale;
          for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
            scores[h * kBlock + j - j0] = row_scale * dot(q + (b * H + h) * D, k + r * D, D);
        }
      }
      const bool plain = detail::tile_is_plain(p, b, 0, 1, j0, j1);
      for (int64_t h = 0; h < H; ++h) {
        float* s = scores + h * kBlock;
        float* o = part + h * stride;
        if (!plain) detail::bias_and_mask(s, kBlock, p, buckets, b, h, 0, 1, j0, j1);
        float m = kMasked;
        for (int64_t j = 0; j < j1 - j0; ++j) m = std::max(m, s[j]);
        if (m == kMasked) continue;  // every key of the block masked for this head
        o[D] = m;
        o[D + 1] = static_cast<float>(vec::sum<float>(j1 - j0, [&](int64_t j) { return s[j] = vec::exp(s[j] - m); }));
        std::fill_n(o, D, 0.0f);
      }
      if constexpr (kD > 0 && kD % kLanes == 0 && kD / kLanes <= 8) {
        // Head by head, the head's output in registers over the block's positions (position by position it was
        // loaded and stored again for every row: 4 KiB of loads and stores per position and head of GPT-2). The
        // block's value rows, 32 positions, stay in L1 and L2 after the first head reads them. Each output channel
        // sums the same products in the same order.
        for (int64_t h = 0; h < H; ++h) {
          float* o = part + h * stride;
          if (o[D + 1] <= 0.0f) continue;
          const int64_t kvh = h / G;
          Lanes acc[kD / kLanes];
#pragma GCC unroll 8
          for (int64_t d = 0; d < kD / kLanes; ++d) acc[d] = Lanes{};
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t r = (b * rows + j + shift) * Hkv + kvh;
            const float row_scale = v_scales != nullptr ? v_scales[r] : 1.0f;
            const float w = scores[h * kBlock + j - j0] * row_scale;
#pragma GCC unroll 8
            for (int64_t d = 0; d < kD / kLanes; ++d) acc[d] = acc[d] + w * load(v + r * D + d * kLanes);
          }
#pragma GCC unroll 8
          for (int64_t d = 0; d < kD / kLanes; ++d) lanes::store(o + d * kLanes, acc[d]);
        }
      } else {
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
            const int64_t r = (b * rows + j + shift) * Hkv + kvh;
            const float row_scale = v_scales != nullptr ? v_scales[r] : 1.0f;
            for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
              if (part[h * stride + D + 1] > 0.0f) axpy(part + h * stride, scores[h * kBlock + j - j0] * row_scale, v + r * D, D);
          }
        }
      }
    }
  });

  // Each (b, h) merges its blocks in order; a query whose keys are all masked gets zeros.
  parallel_for(p.B * H, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H;
      const float* first = partials + (b * n_blocks * H + h) * stride;  // block 0; block n is n·H·stride further
      float m = kMasked;
      for (int64_t n = 0; n < n_blocks; ++n) {
        const float* o = first + n * H * stride;
        if (o[D + 1] > 0.0f) m = std::max(m, o[D]);
      }
      float* O = out + i * D;
      std::fill_n(O, D, 0.0f);
      if (m == kMasked) continue;
      float l = 0.0f;
      for (int64_t n = 0; n < n_blocks; ++n) {
        const float* o = first + n * H * stride;
        if (o[D + 1] == 0.0f) continue;
        const float weight = vec::exp(o[D] - m);
        l += weight * o[D + 1];
        for (int64_t d = 0; d < D; ++d) O[d] += weight * o[d];
      }
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < D; ++d) O[d] *= inv;
    }
  });
}


template <typename KV>
void decode_attention_any(float* out, const float* q, const KV* k, const KV* v, const float* k_scales,
                          const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  switch (p.d_head) {
    case 64: return decode_attention<64>(out, q, k, v, k_scales, v_scales, p, workspace);
    case 128: return decode_attention<128>(out, q, k, v, k_scales, v_scales, p, workspace);
    default: return decode_attention<0>(out, q, k, v, k_scales, v_scales, p, workspace);
  }
}

}  // namespace

void decode_attention_f32(float* out, const float* q, const float* k, const float* v, const float* k_scales,
                          const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  decode_attention_any(out, q, k, v, k_scales, v_scales, p, workspace);
}

void decode_attention_f16(float* out, const float* q, const uint16_t* k, const uint16_t* v, const float* k_scales,
                          const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  decode_attention_any(out, q, k, v, k_scales, v_scales, p, workspace);
}

void decode_attention_i8(float* out, const float* q, const int8_t* k, const int8_t* v, const float* k_scales,
                         const float* v_scales, const AttentionParams<float>& p, float* workspace) {
  decode_attention_any(out, q, k, v, k_scales, v_scales, p, workspace);
}

}  // namespace attend::kernels::ATTEND_ISA

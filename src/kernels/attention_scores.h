// What the three attention kernels share: which scores are masked and what bias each one gets.
// Internal to src/kernels.
#pragma once

#include "kernels/attention.h"
#include "kernels/isa_namespace.h"
#include "kernels/position.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace attend::kernels::detail {
inline namespace ATTEND_ISA_NAMESPACE {

// The T5 bucket of every relative position a call can meet, j − pos_i ∈ [−(q_offset + Tq − 1), Tk − 1],
// so the tiles look buckets up instead of taking a logarithm per score.
template <typename T>
int64_t t5_bucket_table_size(const AttentionParams<T>& p) {
  return p.t5_table != nullptr ? p.q_offset + p.Tq + p.Tk - 1 : 0;
}

template <typename T>
void fill_t5_buckets(int32_t* buckets, const AttentionParams<T>& p) {
  const int64_t lowest = -(p.q_offset + p.Tq - 1);
  for (int64_t r = 0; r < t5_bucket_table_size(p); ++r)
    buckets[r] = t5_relative_bucket(lowest + r, p.t5_bidirectional, p.t5_num_buckets, p.t5_max_distance);
}

template <typename T>
int32_t t5_bucket(const int32_t* buckets, const AttentionParams<T>& p, int64_t i, int64_t j) {
  return buckets[j - i + p.Tq - 1];  // j − (q_offset + i) − lowest
}

// True when no score of the tile (rows i0..i1, keys j0..j1) is masked or biased, so the tile needs no
// element-wise pass: the common case away from the causal diagonal and the padding.
template <typename T>
bool tile_is_plain(const AttentionParams<T>& p, int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (p.mask != nullptr || p.alibi_slopes != nullptr || p.t5_table != nullptr) return false;
  if (p.causal && j1 - 1 > p.q_offset + i0) return false;
  if (p.window > 0 && j0 <= p.q_offset + i1 - 1 - p.window) return false;  // the last row's oldest keys fall out
  if (p.key_lengths != nullptr && j1 > p.key_lengths[b]) return false;
  return true;
}

// The first key that query row i may see: 0, or the oldest key of its sliding window.
template <typename T>
int64_t first_visible_key(const AttentionParams<T>& p, int64_t i) {
  return p.window > 0 ? std::max<int64_t>(0, p.q_offset + i - p.window + 1) : 0;
}

// True when every score of the tile is masked, so the tile can be skipped.
template <typename T>
bool tile_is_masked(const AttentionParams<T>& p, int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (p.causal && j0 > p.q_offset + i1 - 1) return true;
  if (p.window > 0 && j1 - 1 < first_visible_key(p, i0)) return true;  // older than even the first row's window
  if (p.key_lengths != nullptr && j0 >= p.key_lengths[b]) return true;
  return false;
}

// Adds the position bias to the scores of rows i0..i1 and keys j0..j1 of head h and sets masked
// scores to −∞. S is row-major with leading dimension ld, S[0] being (i0, j0).
template <typename T>
void bias_and_mask(T* S, int64_t ld, const AttentionParams<T>& p, const int32_t* buckets, int64_t b, int64_t h,
                   int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  constexpr T kMasked = -std::numeric_limits<T>::infinity();
  const int64_t key_end = p.key_lengths != nullptr ? p.key_lengths[b] : p.Tk;
  for (int64_t i = i0; i < i1; ++i) {
    T* row = S + (i - i0) * ld - j0;
    const int64_t pos = p.q_offset + i;
    if (p.alibi_slopes != nullptr) {
      const double m = p.alibi_slopes[h];
      for (int64_t j = j0; j < j1; ++j) row[j] += static_cast<T>(-m * static_cast<double>(std::llabs(pos - j)));
    }
    if (p.t5_table != nullptr) {
      for (int64_t j = j0; j < j1; ++j) row[j] += p.t5_table[t5_bucket(buckets, p, i, j) * p.n_heads + h];
    }
    const int64_t visible_end = p.causal ? std::min(key_end, pos + 1) : key_end;
    for (int64_t j = std::max(j0, visible_end); j < j1; ++j) row[j] = kMasked;
    for (int64_t j = j0, first = std::min(j1, first_visible_key(p, i)); j < first; ++j) row[j] = kMasked;
    if (p.mask != nullptr) {
      const uint8_t* allowed = p.mask + (b * p.Tq + i) * p.Tk;
      for (int64_t j = j0; j < j1; ++j)
        if (allowed[j] == 0) row[j] = kMasked;
    }
  }
}

// The dropout stream index of probability (b, h, i, j).
template <typename T>
uint64_t dropout_index(const AttentionParams<T>& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return p.dropout_offset + static_cast<uint64_t>(((b * p.n_heads + h) * p.Tq + i) * p.Tk + j);
}

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::detail

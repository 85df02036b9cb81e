// The KV cache (001 §10, 004 §10.3-10.4): keys and values of every layer, preallocated for max_T
// positions and written at the current position, never concatenated. Decoding one token then reads
// t cached rows, O(t·d), instead of recomputing the prefix, O(t²·d).
//
// Storage is fp32, fp16 or int8 with one scale per (position, head) row. Memory is
// 2 · n_layers · batch · n_kv_heads · d_head · max_T · bytes (+ 4 bytes per row for int8 scales).
// A generated token's attention reads the rows as stored (attend); longer prompts read fp32 copies
// (keys, values) through the tiled kernel.
#pragma once

#include "kernels/attention.h"

#include <attend/model.h>

#include <cstdint>
#include <vector>

namespace attend::nn {

struct KVCacheConfig {
  int64_t n_layers = 1;   // e.g. 12
  int64_t batch = 1;      // sequences decoded together
  int64_t max_T = 1024;   // positions preallocated, e.g. the model's context length
  int64_t n_kv_heads = 1; // e.g. 12 (MHA), 4 (GQA), 1 (MQA)
  int64_t d_head = 64;
  CacheType storage = CacheType::F32;
};

class KVCache {
 public:
  explicit KVCache(const KVCacheConfig& config);

  const KVCacheConfig& config() const { return config_; }
  // Bytes this cache holds, and what a cache of `config` would hold (to plan before allocating).
  int64_t memory_bytes() const { return memory_bytes(config_); }
  static int64_t memory_bytes(const KVCacheConfig& config);

  // Stores keys and values for positions [pos, pos + T_new) of `layer`: k and v are
  // (batch, T_new, n_kv_heads, d_head). Throws attend::Error if pos + T_new > max_T.
  void write(int64_t layer, int64_t pos, const float* k, const float* v, int64_t T_new);

  // Positions [0, length) of `layer` as fp32, laid out (batch, max_T, n_kv_heads, d_head): pass
  // max_T as the attention's kv_rows. fp32 storage returns the cache itself; fp16 and int8 are
  // converted into an internal buffer, O(length·d).
  const float* keys(int64_t layer, int64_t length);
  const float* values(int64_t layer, int64_t length);

  // Decoding's attention over `layer` (kernels::decode_attention_forward): one query per sequence,
  // q and out (batch, 1, n_heads, d_head), against the first p.Tk positions, read as stored (no fp32 copy).
  // p describes the call (p.Tq = 1); its kv_capacity is set here.
  void attend(int64_t layer, float* out, const float* q, kernels::AttentionParams<float> p);

  // Copies positions [0, length) of every layer and sequence from `other`, a cache of the same configuration,
  // into this one's storage (a session continuing from another's point: beam search).
  void copy_from(const KVCache& other, int64_t length);

 private:
  const float* read(int64_t layer, int64_t length, bool value);
  int64_t row(int64_t layer, bool value, int64_t b, int64_t pos) const;  // index of a (position, head) row

  KVCacheConfig config_;
  int64_t rows_per_layer_;  // batch · max_T · n_kv_heads, for keys and for values
  std::vector<float> f32_;
  std::vector<uint16_t> f16_;
  std::vector<int8_t> i8_;
  std::vector<float> scales_;
  std::vector<float> decoded_[2];  // fp32 copies of the keys and values read last (fp16 and int8 only)
  std::vector<float> workspace_;   // attend()'s scratch: score rows and T5 buckets
};

}  // namespace attend::nn

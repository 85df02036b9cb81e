// The KV cache (001 §10, 004 §10.3-10.4): keys and values of every layer, preallocated for max_T
// positions and written at the current position, never concatenated. Decoding one token then reads
// t cached rows, O(t·d), instead of recomputing the prefix, O(t²·d).
//
// Storage is fp32, fp16 or int8 with one scale per (position, head) row. Memory is
// 2 · n_layers · batch · n_kv_heads · d_head · max_T · bytes (+ 4 bytes per row for int8 scales).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace attend::infer {

enum class CacheStorage { F32, F16, I8 };

const char* cache_storage_name(CacheStorage s);
// "f32", "f16" or "int8"; throws attend::Error otherwise.
CacheStorage parse_cache_storage(std::string_view name);

struct KVCacheConfig {
  int64_t n_layers = 1;   // e.g. 12
  int64_t batch = 1;      // sequences decoded together
  int64_t max_T = 1024;   // positions preallocated, e.g. the model's context length
  int64_t n_kv_heads = 1; // e.g. 12 (MHA), 4 (GQA), 1 (MQA)
  int64_t d_head = 64;
  CacheStorage storage = CacheStorage::F32;
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

  // Beam search: sequence b continues from sequence source[b] (every layer, positions [0, length)).
  void reorder(const std::vector<int64_t>& source, int64_t length);

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
};

}  // namespace attend::infer

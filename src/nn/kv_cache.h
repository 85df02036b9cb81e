// The KV cache (001 §10, 004 §10.3-10.4): keys and values of every layer, preallocated for max_T
// positions and written at the current position, never concatenated. Decoding one token then reads
// t cached rows, O(t·d), instead of recomputing the prefix, O(t²·d).
//
// Storage is fp32, fp16 or int8 with one scale per (position, head) row. Memory is
// 2 · n_layers · batch · n_kv_heads · d_head · max_T · bytes (+ 4 bytes per row for int8 scales).
// A generated token's attention reads the rows as stored (attend); longer prompts read fp32 copies
// (keys, values) through the tiled kernel.
//
// A paged cache (one sequence) holds no storage of its own: it takes blocks of 32 positions from a KVPool
// as positions are written (reserve) and gives them back when it ends; its table maps position p to block
// table[p / 32]. A copy shares the full blocks and copies the last, partly written one (copy on write).
#pragma once

#include "kernels/attention.h"
#include "nn/kv_pool.h"

#include <attend/model.h>

#include <cstdint>
#include <memory>
#include <span>
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
  // A paged cache of up to max_T positions on `pool` (whose layers, heads and storage it takes).
  KVCache(std::shared_ptr<KVPool> pool, int64_t max_T);
  ~KVCache();
  KVCache(const KVCache& other);
  KVCache& operator=(const KVCache& other);

  bool paged() const { return pool_ != nullptr; }
  KVPool* pool() const { return pool_.get(); }
  // Paged: the blocks of positions [0, 32·blocks().size()), in order.
  const std::vector<int32_t>& blocks() const { return table_; }
  // Paged: takes blocks from the pool until positions [0, end) have one; false, and nothing taken, when the
  // pool has too few. (A contiguous cache has room for max_T: true up to it.)
  bool reserve(int64_t end);
  // Paged: gives back the blocks past the first n (a step that could not reserve for every sequence).
  void shrink_blocks(size_t n);
  // Blocks still to take for positions [0, end).
  int64_t blocks_needed(int64_t end) const;
  // Paged and empty: starts with `blocks`, already held for this cache (a prefix the pool's cache matched).
  void adopt(std::vector<int32_t> blocks);

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

  // Decoding's attention for several paged caches of one pool at once, one query each (out and q: (caches, 1,
  // n_heads, d_head)), each over its first lengths[i] positions: one kernel call (one parallel region) for all of
  // them, each sequence's numbers those of its own attend(). p describes the call as for one sequence (no window,
  // no position biases); B, Tk, key lengths and the block table are set here.
  static void attend_paged(std::span<KVCache* const> caches, std::span<const int32_t> lengths, int64_t layer,
                           float* out, const float* q, kernels::AttentionParams<float> p);

  // Copies positions [0, length) of every layer and sequence from `other`, a cache of the same configuration,
  // into this one's storage (a session continuing from another's point: beam search). Paged: shares other's
  // full blocks and copies its last one.
  void copy_from(const KVCache& other, int64_t length);

 private:
  const float* read(int64_t layer, int64_t length, bool value);
  int64_t row(int64_t layer, bool value, int64_t b, int64_t pos) const;  // index of a (position, head) row
  KVStorage& storage() { return pool_ ? pool_->storage() : own_; }
  // Calls f(first_position, positions) for the runs of [pos, pos + n) that lie in one block (one run when
  // the cache is contiguous).
  template <typename F>
  void runs(int64_t pos, int64_t n, F&& f) const;
  void release_blocks();
  // Decoding's attention on rows of `s` (the layer's keys and values from rows `keys` and `values`), by its type.
  static void decode(KVStorage& s, int64_t keys, int64_t values, float* out, const float* q,
                     const kernels::AttentionParams<float>& p, std::vector<float>& workspace);

  KVCacheConfig config_;
  KVStorage own_;                  // contiguous: every row
  std::shared_ptr<KVPool> pool_;   // paged: the pool and this sequence's blocks
  std::vector<int32_t> table_;
  std::vector<float> decoded_[2];  // fp32 copies of the keys and values read last (fp16, int8 and paged)
  std::vector<float> workspace_;   // attend()'s scratch: score rows and T5 buckets
};

}  // namespace attend::nn

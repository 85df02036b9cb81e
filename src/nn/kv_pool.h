// Paged KV storage (vLLM's PagedAttention idea, written for Attend's caches): one pool of fixed blocks of
// kBlock positions for every layer's keys and values, from which sequences take blocks as they grow and to
// which they give them back when they end, instead of each holding a whole context. A sequence's cache is a
// table of block numbers (KVCache's paged mode); decoding's attention reads the blocks where they lie.
//
// The pool also keeps a prefix cache: a block whose 32 positions a prompt filled can be published under the
// tokens that led to it (all of them, from position 0), and a later sequence whose tokens start the same way
// takes the same blocks instead of recomputing them. Published blocks are shared read-only; a block no
// sequence holds any more stays cached until the pool needs it (least recently used first).
//
// Every method is thread-safe: sessions on one pool may run on several threads.
#pragma once

#include "kernels/decode_attention_layout.h"

#include <attend/model.h>
#include <attend/parameter.h>

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace attend::nn {

// Keys or values of many (position, head) rows: fp32, fp16, or int8 with one scale per row.
class KVStorage {
 public:
  KVStorage() = default;
  KVStorage(CacheType type, int64_t rows, int64_t d_head);
  CacheType type() const { return type_; }
  static int64_t row_bytes(CacheType type, int64_t d_head);

  void store(int64_t row, const float* src, int64_t n_rows);  // rows [row, row + n_rows) from fp32
  void load(float* dst, int64_t row, int64_t n_rows) const;   // the same rows as fp32
  void copy_rows(int64_t to, const KVStorage& from, int64_t row, int64_t n_rows);

  float* f32(int64_t row) { return f32_.data() + row * d_head_; }
  uint16_t* f16(int64_t row) { return f16_.data() + row * d_head_; }
  int8_t* i8(int64_t row) { return i8_.data() + row * d_head_; }
  float* scales(int64_t row) { return scales_.data() + row; }

 private:
  // In allocate_weights' memory: decoding streams every cached row once a token, and from 4 KiB pages it read
  // them at a fraction of the rate huge pages give (the hardware prefetchers stop at each page's end).
  template <typename T>
  using Rows = std::vector<T, WeightAllocator<T>>;
  CacheType type_ = CacheType::F32;
  int64_t d_head_ = 0;
  Rows<float> f32_;
  Rows<uint16_t> f16_;
  Rows<int8_t> i8_;
  Rows<float> scales_;
};

struct KVPoolConfig {
  int64_t n_layers = 1;
  int64_t n_kv_heads = 1;
  int64_t d_head = 64;
  CacheType storage = CacheType::F32;
  int64_t blocks = 64;  // e.g. 16 sequences of 1,024 positions: 512
};

class KVPool {
 public:
  // Positions per block: decoding's attention reads keys in work items of this many, one block each.
  static constexpr int64_t kBlock = kernels::decode_layout::kBlock;

  explicit KVPool(const KVPoolConfig& config);
  KVPool(const KVPool&) = delete;
  KVPool& operator=(const KVPool&) = delete;

  const KVPoolConfig& config() const { return config_; }
  static int64_t block_bytes(const KVPoolConfig& config);  // one block's keys and values, every layer
  int64_t memory_bytes() const { return config_.blocks * block_bytes(config_); }

  // Blocks that allocate() can hand out now: free ones and cached ones that no sequence holds.
  int64_t available() const;
  int64_t in_use() const;  // held by at least one sequence
  int64_t cached() const;  // in the prefix cache, held or not

  // n blocks, each held once by the caller, appended to `out`; all or nothing: false when the pool has fewer
  // than n available. Cached blocks that nobody holds are taken last, oldest first (and leave the cache).
  bool allocate(int64_t n, std::vector<int32_t>& out);
  void retain(int32_t block);
  void release(int32_t block);  // the caller's hold ends: a free block again, or a cached one nobody holds

  // The longest run of whole blocks that the cache holds for tokens[0, 32·k): appends those k blocks to `out`
  // (each now held by the caller) and returns k. Only blocks published after the same preceding blocks, and
  // under the same salt (what else their keys and values depend on: a session's LoRA adapters and their scales;
  // compared whole, not by a hash), match.
  int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& out, std::span<const uint64_t> salt = {});
  // Publishes blocks[i] as holding the keys and values of tokens [32·i, 32·i + 32), given those before them
  // (tokens.size() ≥ 32·blocks.size()). A block whose content the cache already holds elsewhere is left out.
  void publish(std::span<const int32_t> tokens, std::span<const int32_t> blocks, std::span<const uint64_t> salt = {});

  // Storage rows: keys (value false) or values of `layer` in `block`, position `offset` in it, head 0; the
  // rows of one block and layer are contiguous, (position, head), so that decoding reads a block in one run.
  int64_t row(int64_t layer, bool value, int64_t block, int64_t offset) const {
    return (((2 * layer + (value ? 1 : 0)) * config_.blocks + block) * kBlock + offset) * config_.n_kv_heads;
  }
  KVStorage& storage() { return storage_; }
  const KVStorage& storage() const { return storage_; }

 private:
  struct Cached {  // a published block: what it holds and what it followed
    uint64_t key = 0;
    int32_t parent = -1;
    uint64_t parent_generation = 0;
    std::vector<uint64_t> salt;
    std::vector<int32_t> tokens;  // its kBlock tokens
  };
  uint64_t chain(uint64_t parent_key, std::span<const int32_t> tokens) const;
  static uint64_t salted(std::span<const uint64_t> salt);  // the first block's parent key
  void evict(int32_t block);  // out of the cache (mutex held)

  KVPoolConfig config_;
  KVStorage storage_;
  mutable std::mutex mutex_;
  std::vector<int32_t> refs_;              // holds per block
  std::vector<uint64_t> generation_;       // bumped whenever a block leaves the cache
  std::vector<int32_t> free_;              // blocks nobody holds and the cache does not keep
  std::vector<Cached> cached_;             // per block; key 0 = not cached
  std::unordered_map<uint64_t, int32_t> by_key_;
  std::list<int32_t> idle_;                // cached blocks nobody holds, least recently used first
  std::vector<std::list<int32_t>::iterator> idle_at_;
  std::vector<bool> idle_member_;
  int64_t cached_count_ = 0, in_use_ = 0;
};

}  // namespace attend::nn

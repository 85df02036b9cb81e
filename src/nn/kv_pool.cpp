#include "nn/kv_pool.h"

#include "core/hash.h"
#include "kernels/convert.h"

#include <attend/error.h>

#include <algorithm>
#include <cstring>

namespace attend::nn {

// ---- storage ------------------------------------------------------------------------------------------

KVStorage::KVStorage(CacheType type, int64_t rows, int64_t d_head) : type_(type), d_head_(d_head) {
  switch (type) {
    case CacheType::F32: f32_.assign(rows * d_head, 0.0f); break;
    case CacheType::F16: f16_.assign(rows * d_head, 0); break;
    case CacheType::Int8:
      i8_.assign(rows * d_head, 0);
      scales_.assign(rows, 0.0f);
      break;
  }
}

int64_t KVStorage::row_bytes(CacheType type, int64_t d_head) {
  switch (type) {
    case CacheType::F32: return d_head * 4;
    case CacheType::F16: return d_head * 2;
    case CacheType::Int8: return d_head + 4;  // int8 values and one float scale
  }
  return 0;
}

void KVStorage::store(int64_t row, const float* src, int64_t n_rows) {
  switch (type_) {
    case CacheType::F32: std::memcpy(f32(row), src, n_rows * d_head_ * sizeof(float)); break;
    case CacheType::F16: kernels::float_to_half(f16(row), src, n_rows * d_head_); break;
    case CacheType::Int8: kernels::quantize_rows_int8(i8(row), scales(row), src, n_rows, d_head_); break;
  }
}

void KVStorage::load(float* dst, int64_t row, int64_t n_rows) const {
  switch (type_) {
    case CacheType::F32: std::memcpy(dst, f32_.data() + row * d_head_, n_rows * d_head_ * sizeof(float)); break;
    case CacheType::F16: kernels::half_to_float(dst, f16_.data() + row * d_head_, n_rows * d_head_); break;
    case CacheType::Int8:
      kernels::dequantize_rows_int8(dst, i8_.data() + row * d_head_, scales_.data() + row, n_rows, d_head_);
      break;
  }
}

void KVStorage::copy_rows(int64_t to, const KVStorage& from, int64_t row, int64_t n_rows) {
  const int64_t n = n_rows * d_head_;
  switch (type_) {
    case CacheType::F32: std::copy_n(from.f32_.data() + row * d_head_, n, f32(to)); break;
    case CacheType::F16: std::copy_n(from.f16_.data() + row * d_head_, n, f16(to)); break;
    case CacheType::Int8:
      std::copy_n(from.i8_.data() + row * d_head_, n, i8(to));
      std::copy_n(from.scales_.data() + row, n_rows, scales(to));
      break;
  }
}

// ---- the pool -----------------------------------------------------------------------------------------

KVPool::KVPool(const KVPoolConfig& c) : config_(c) {
  check(c.n_layers > 0 && c.n_kv_heads > 0 && c.d_head > 0 && c.blocks > 0 && c.blocks < (int64_t{1} << 30),
        "KV pool: every size must be positive (blocks below 2^30), got n_layers={} n_kv_heads={} d_head={} blocks={}",
        c.n_layers, c.n_kv_heads, c.d_head, c.blocks);
  storage_ = KVStorage(c.storage, 2 * c.n_layers * c.blocks * kBlock * c.n_kv_heads, c.d_head);
  refs_.assign(c.blocks, 0);
  generation_.assign(c.blocks, 0);
  cached_.resize(c.blocks);
  idle_at_.resize(c.blocks);
  idle_member_.assign(c.blocks, false);
  free_.resize(c.blocks);
  for (int64_t b = 0; b < c.blocks; ++b) free_[b] = static_cast<int32_t>(c.blocks - 1 - b);  // block 0 first
}

int64_t KVPool::block_bytes(const KVPoolConfig& c) {
  return 2 * c.n_layers * kBlock * c.n_kv_heads * KVStorage::row_bytes(c.storage, c.d_head);
}

int64_t KVPool::available() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.size() + idle_.size());
}
int64_t KVPool::in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}
int64_t KVPool::cached() const {
  std::lock_guard lock(mutex_);
  return cached_count_;
}

bool KVPool::allocate(int64_t n, std::vector<int32_t>& out) {
  std::lock_guard lock(mutex_);
  if (n < 0 || n > static_cast<int64_t>(free_.size() + idle_.size())) return false;
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // the least recently used cached block that nobody holds
      b = idle_.front();
      evict(b);
    }
    refs_[b] = 1;
    ++in_use_;
    out.push_back(b);
  }
  return true;
}

void KVPool::retain(int32_t b) {
  std::lock_guard lock(mutex_);
  check(b >= 0 && b < config_.blocks, "KV pool: block {} out of range [0, {})", b, config_.blocks);
  if (refs_[b]++ == 0) {
    ++in_use_;
    if (idle_member_[b]) idle_.erase(idle_at_[b]), idle_member_[b] = false;
  }
}

void KVPool::release(int32_t b) {
  std::lock_guard lock(mutex_);
  check(b >= 0 && b < config_.blocks && refs_[b] > 0, "KV pool: releasing block {} that nobody holds", b);
  if (--refs_[b] > 0) return;
  --in_use_;
  if (cached_[b].key != 0) {
    idle_at_[b] = idle_.insert(idle_.end(), b);
    idle_member_[b] = true;
  } else {
    free_.push_back(b);
  }
}

void KVPool::evict(int32_t b) {
  Cached& c = cached_[b];
  by_key_.erase(c.key);
  c = Cached{};
  ++generation_[b];
  --cached_count_;
  if (idle_member_[b]) idle_.erase(idle_at_[b]), idle_member_[b] = false;
}

// FNV-1a over the parent's key and the block's tokens; 0 is kept for "not cached".
uint64_t KVPool::chain(uint64_t parent_key, std::span<const int32_t> tokens) const {
  Fnv1a h;
  h.add(parent_key);
  for (int32_t t : tokens) h.add(uint64_t{static_cast<uint32_t>(t)});
  return h.hash == 0 ? 1 : h.hash;
}

uint64_t KVPool::salted(std::span<const uint64_t> salt) {
  Fnv1a h;
  for (const uint64_t word : salt) h.add(word);
  return salt.empty() ? 0 : h.hash;
}

int64_t KVPool::match(std::span<const int32_t> tokens, std::vector<int32_t>& out, std::span<const uint64_t> salt) {
  std::lock_guard lock(mutex_);
  uint64_t key = salted(salt);
  int32_t parent = -1;
  int64_t k = 0;
  for (; (k + 1) * kBlock <= static_cast<int64_t>(tokens.size()); ++k) {
    const std::span<const int32_t> t = tokens.subspan(k * kBlock, kBlock);
    key = chain(key, t);
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) break;
    const int32_t b = it->second;
    const Cached& c = cached_[b];  // the key is a hash: check what the block really holds and follows
    if (c.parent != parent || (parent >= 0 && c.parent_generation != generation_[parent]) ||
        !std::equal(salt.begin(), salt.end(), c.salt.begin(), c.salt.end()) ||
        !std::equal(t.begin(), t.end(), c.tokens.begin()))
      break;
    if (refs_[b]++ == 0) {
      ++in_use_;
      if (idle_member_[b]) idle_.erase(idle_at_[b]), idle_member_[b] = false;
    }
    out.push_back(b);
    parent = b;
  }
  return k;
}

void KVPool::publish(std::span<const int32_t> tokens, std::span<const int32_t> blocks, std::span<const uint64_t> salt) {
  check(tokens.size() >= blocks.size() * kBlock, "KV pool: publishing {} blocks of {} tokens", blocks.size(),
        tokens.size());
  std::lock_guard lock(mutex_);
  uint64_t key = salted(salt);
  int32_t parent = -1;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t b = blocks[i];
    check(b >= 0 && b < config_.blocks && refs_[b] > 0, "KV pool: publishing block {} that nobody holds", b);
    const std::span<const int32_t> t = tokens.subspan(i * kBlock, kBlock);
    key = chain(key, t);
    const auto it = by_key_.find(key);
    if (it != by_key_.end()) {  // already cached: by this block, or the same content in another
      parent = it->second;
      if (it->second != b) {
        const Cached& c = cached_[it->second];
        if (!std::equal(salt.begin(), salt.end(), c.salt.begin(), c.salt.end()) ||
            !std::equal(t.begin(), t.end(), c.tokens.begin()))
          return;  // a hash collision: stop publishing here
      }
      continue;
    }
    if (cached_[b].key != 0) return;  // the block is cached under other content: it cannot follow this chain
    cached_[b] = Cached{key, parent, parent >= 0 ? generation_[parent] : 0,
                        std::vector<uint64_t>(salt.begin(), salt.end()), std::vector<int32_t>(t.begin(), t.end())};
    by_key_[key] = b;
    ++cached_count_;
    parent = b;
  }
}

}  // namespace attend::nn

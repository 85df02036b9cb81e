#include "nn/kv_cache.h"

#include "core/enum_names.h"
#include "kernels/convert.h"
#include "kernels/parallel.h"

#include <attend/error.h>

#include <algorithm>
#include <cstring>

namespace attend {

namespace {
constexpr EnumName<CacheType> kCacheTypes[] = {{CacheType::F32, "f32"}, {CacheType::F16, "f16"}, {CacheType::Int8, "int8"}};
}  // namespace

const char* cache_type_name(CacheType t) { return enum_name<CacheType>(kCacheTypes, t); }
CacheType parse_cache_type(std::string_view name) { return parse_enum<CacheType>(kCacheTypes, name, "KV cache type"); }

namespace nn {

int64_t KVCache::memory_bytes(const KVCacheConfig& c) {
  return 2 * c.n_layers * c.batch * c.max_T * c.n_kv_heads * KVStorage::row_bytes(c.storage, c.d_head);
}

KVCache::KVCache(const KVCacheConfig& c) : config_(c) {
  check(c.n_layers > 0 && c.batch > 0 && c.max_T > 0 && c.n_kv_heads > 0 && c.d_head > 0,
        "KV cache: every size must be positive, got n_layers={} batch={} max_T={} n_kv_heads={} d_head={}", c.n_layers,
        c.batch, c.max_T, c.n_kv_heads, c.d_head);
  own_ = KVStorage(c.storage, 2 * c.n_layers * c.batch * c.max_T * c.n_kv_heads, c.d_head);
}

KVCache::KVCache(std::shared_ptr<KVPool> pool, int64_t max_T) : pool_(std::move(pool)) {
  check(pool_ != nullptr && max_T > 0, "KV cache: a paged cache needs a pool and max_T > 0, got max_T={}", max_T);
  const KVPoolConfig& p = pool_->config();
  config_ = {p.n_layers, 1, max_T, p.n_kv_heads, p.d_head, p.storage};
}

KVCache::~KVCache() { release_blocks(); }

KVCache::KVCache(const KVCache& other)
    : config_(other.config_), own_(other.own_), pool_(other.pool_) {
  if (!paged()) return;
  const int64_t n = static_cast<int64_t>(other.table_.size());
  if (n == 0) return;
  // Every block but the last is shared; the last may still be written by either copy: copy it.
  for (int64_t i = 0; i + 1 < n; ++i) pool_->retain(other.table_[i]), table_.push_back(other.table_[i]);
  std::vector<int32_t> last;
  check(pool_->allocate(1, last), "KV pool: no free block to copy a sequence's last block into ({} blocks, all held)",
        pool_->config().blocks);
  table_.push_back(last[0]);
  for (int64_t layer = 0; layer < config_.n_layers; ++layer)
    for (const bool value : {false, true})
      pool_->storage().copy_rows(pool_->row(layer, value, last[0], 0), pool_->storage(),
                                 pool_->row(layer, value, other.table_[n - 1], 0), KVPool::kBlock * config_.n_kv_heads);
}

KVCache& KVCache::operator=(const KVCache& other) {
  if (this != &other) {
    KVCache copy(other);
    release_blocks();
    config_ = copy.config_;
    own_ = std::move(copy.own_);
    pool_ = copy.pool_;
    table_ = std::move(copy.table_);
    copy.table_.clear();
  }
  return *this;
}

void KVCache::release_blocks() {
  // Last first: the pool's prefix cache then drops a chain's tail before its head.
  if (pool_)
    for (auto b = table_.rbegin(); b != table_.rend(); ++b) pool_->release(*b);
  table_.clear();
}

int64_t KVCache::blocks_needed(int64_t end) const {
  if (!paged()) return 0;
  const int64_t want = (std::min(end, config_.max_T) + KVPool::kBlock - 1) / KVPool::kBlock;
  return std::max<int64_t>(0, want - static_cast<int64_t>(table_.size()));
}

bool KVCache::reserve(int64_t end) {
  if (end > config_.max_T) return false;
  if (!paged()) return true;
  const int64_t n = blocks_needed(end);
  return n == 0 || pool_->allocate(n, table_);
}

void KVCache::shrink_blocks(size_t n) {
  while (paged() && table_.size() > n) {
    pool_->release(table_.back());
    table_.pop_back();
  }
}

void KVCache::adopt(std::vector<int32_t> blocks) {
  check(paged() && table_.empty(), "KV cache: only an empty paged cache adopts blocks");
  check(static_cast<int64_t>(blocks.size()) * KVPool::kBlock <= config_.max_T,
        "KV cache: {} blocks do not fit {} positions", blocks.size(), config_.max_T);
  table_ = std::move(blocks);
}

int64_t KVCache::row(int64_t layer, bool value, int64_t b, int64_t pos) const {
  if (paged()) return pool_->row(layer, value, table_[pos / KVPool::kBlock], pos % KVPool::kBlock);
  return ((2 * layer + (value ? 1 : 0)) * config_.batch + b) * config_.max_T * config_.n_kv_heads +
         pos * config_.n_kv_heads;
}

template <typename F>
void KVCache::runs(int64_t pos, int64_t n, F&& f) const {
  if (!paged()) return n > 0 ? f(pos, n) : void();
  for (int64_t p = pos; p < pos + n;) {
    const int64_t len = std::min(pos + n, (p / KVPool::kBlock + 1) * KVPool::kBlock) - p;
    f(p, len);
    p += len;
  }
}

void KVCache::write(int64_t layer, int64_t pos, const float* k, const float* v, int64_t T_new) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(pos >= 0 && T_new >= 0 && pos + T_new <= c.max_T,
        "KV cache: writing positions [{}, {}) but the cache holds {} positions (max_T); the sequence is longer "
        "than the context the cache was built for",
        pos, pos + T_new, c.max_T);
  check(blocks_needed(pos + T_new) == 0, "KV cache: writing positions [{}, {}) before their blocks are reserved", pos,
        pos + T_new);
  const int64_t D = c.n_kv_heads * c.d_head;  // floats per position
  KVStorage& s = storage();
  for (int64_t b = 0; b < c.batch; ++b)
    for (const bool value : {false, true}) {
      const float* src = (value ? v : k) + b * T_new * D;
      runs(pos, T_new, [&](int64_t p, int64_t n) {
        s.store(row(layer, value, b, p), src + (p - pos) * D, n * c.n_kv_heads);
      });
    }
}

const float* KVCache::read(int64_t layer, int64_t length, bool value) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(length >= 0 && length <= c.max_T, "KV cache: reading {} positions of a cache of {}", length, c.max_T);
  if (!paged() && c.storage == CacheType::F32) return own_.f32(row(layer, value, 0, 0));
  std::vector<float>& out = decoded_[value ? 1 : 0];
  const int64_t D = c.n_kv_heads * c.d_head;
  out.resize(c.batch * c.max_T * D);
  const KVStorage& s = storage();
  for (int64_t b = 0; b < c.batch; ++b) {
    float* dst = &out[b * c.max_T * D];
    runs(0, length, [&](int64_t p, int64_t n) { s.load(dst + p * D, row(layer, value, b, p), n * c.n_kv_heads); });
  }
  return out.data();
}

void KVCache::copy_from(const KVCache& other, int64_t length) {
  const auto& c = config_;
  const auto& o = other.config_;
  check(c.n_layers == o.n_layers && c.batch == o.batch && c.max_T == o.max_T && c.n_kv_heads == o.n_kv_heads &&
            c.d_head == o.d_head && c.storage == o.storage && pool_ == other.pool_,
        "KV cache: copying from a cache of another configuration");
  check(length >= 0 && length <= c.max_T, "KV cache: copying {} positions of a cache of {}", length, c.max_T);
  if (paged()) {
    if (this != &other) *this = other;
    return;
  }
  const int64_t n_rows = length * c.n_kv_heads;  // rows of one sequence that hold data
  for (int64_t layer = 0; layer < c.n_layers; ++layer)
    for (const bool value : {false, true})
      for (int64_t b = 0; b < c.batch; ++b)
        own_.copy_rows(row(layer, value, b, 0), other.own_, row(layer, value, b, 0), n_rows);
}

void KVCache::attend(int64_t layer, float* out, const float* q, kernels::AttentionParams<float> p) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(p.Tq == 1 && p.B == c.batch && p.n_kv_heads == c.n_kv_heads && p.d_head == c.d_head && p.Tk >= 0 &&
            p.Tk <= c.max_T,
        "KV cache: attend takes one query per sequence over at most {} positions of batch {} × {} heads × {} "
        "channels, got {} queries over {} positions of batch {} × {} × {}",
        c.max_T, c.batch, c.n_kv_heads, c.d_head, p.Tq, p.Tk, p.B, p.n_kv_heads, p.d_head);
  check(blocks_needed(p.Tk) == 0, "KV cache: attending to {} positions, not all of them written", p.Tk);
  p.kv_capacity = c.max_T;
  if (!paged()) return decode(own_, row(layer, false, 0, 0), row(layer, true, 0, 0), out, q, p, workspace_);
  // Paged: the keys are read where they lie, block by block (row (block·32 + offset)·heads of the layer's
  // keys, whose first row is block 0's).
  p.block_table = table_.data();
  decode(pool_->storage(), pool_->row(layer, false, 0, 0), pool_->row(layer, true, 0, 0), out, q, p, workspace_);
}

void KVCache::decode(KVStorage& s, int64_t keys, int64_t values, float* out, const float* q,
                     const kernels::AttentionParams<float>& p, std::vector<float>& workspace) {
  workspace.resize(kernels::decode_attention_workspace_size(p, kernels::num_threads()));
  switch (s.type()) {
    case CacheType::F32:
      kernels::decode_attention_forward(out, q, s.f32(keys), s.f32(values), nullptr, nullptr, p, workspace.data());
      break;
    case CacheType::F16:
      kernels::decode_attention_forward(out, q, s.f16(keys), s.f16(values), nullptr, nullptr, p, workspace.data());
      break;
    case CacheType::Int8:
      kernels::decode_attention_forward(out, q, s.i8(keys), s.i8(values), s.scales(keys), s.scales(values), p,
                                        workspace.data());
      break;
  }
}

void KVCache::attend_paged(std::span<KVCache* const> caches, std::span<const int32_t> lengths, int64_t layer,
                           float* out, const float* q, kernels::AttentionParams<float> p) {
  check(!caches.empty() && caches.size() == lengths.size(), "KV cache: attend_paged takes a length per cache");
  KVPool* pool = caches[0]->pool();
  check(pool != nullptr, "KV cache: attend_paged takes paged caches");
  const auto& c = caches[0]->config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(p.Tq == 1 && p.n_kv_heads == c.n_kv_heads && p.d_head == c.d_head && p.window == 0 &&
            p.alibi_slopes == nullptr && p.t5_table == nullptr && p.mask == nullptr,
        "KV cache: attend_paged takes one query per sequence, no window and no position biases");
  const auto B = static_cast<int64_t>(caches.size());
  int64_t stride = 0, Tk = 0;
  for (int64_t b = 0; b < B; ++b) {
    check(caches[b]->pool() == pool && lengths[b] >= 1 && caches[b]->blocks_needed(lengths[b]) == 0,
          "KV cache: attend_paged's cache {} is on another pool or its {} positions are not all written", b, lengths[b]);
    stride = std::max<int64_t>(stride, static_cast<int64_t>(caches[b]->table_.size()));
    Tk = std::max<int64_t>(Tk, lengths[b]);
  }
  thread_local std::vector<int32_t> table;
  table.assign(static_cast<size_t>(B * stride), 0);
  for (int64_t b = 0; b < B; ++b) std::copy(caches[b]->table_.begin(), caches[b]->table_.end(), table.begin() + b * stride);
  p.B = B, p.Tk = Tk, p.kv_capacity = Tk, p.q_offset = Tk - 1;  // every sequence's keys up to its length
  p.key_lengths = lengths.data();
  p.block_table = table.data(), p.block_table_stride = stride;
  decode(pool->storage(), pool->row(layer, false, 0, 0), pool->row(layer, true, 0, 0), out, q, p, caches[0]->workspace_);
}

const float* KVCache::keys(int64_t layer, int64_t length) { return read(layer, length, false); }
const float* KVCache::values(int64_t layer, int64_t length) { return read(layer, length, true); }

}  // namespace nn
}  // namespace attend

// A map that keeps at most `capacity` entries: inserting past it drops the least recently used one. For
// caches whose keys never stop coming (a oneDNN primitive per matmul shape, when padded batches and prompt
// lengths make new shapes every call), where a plain map would grow without end.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace attend::kernels {

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value for `key`, which becomes the most recently used, or null.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts `key` (not yet present) as the most recently used, first dropping the least recently used
  // entry if the cache is full.
  Value& insert(const Key& key, Value value) {
    if (order_.size() >= capacity_ && !order_.empty()) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return order_.front().second;
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<Key, Value>;
  size_t capacity_;
  std::list<Entry> order_;                                      // most recently used first
  std::map<Key, typename std::list<Entry>::iterator> index_;  // where each key sits in order_
};

}  // namespace attend::kernels

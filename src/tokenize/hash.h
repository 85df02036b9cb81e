// Small open-addressing hash tables for the tokenizers' hot loops, where std::unordered_map's node
// allocation and modulo dominate: pair -> merge lookups in BPE and piece -> ids caches.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

// A hash of a byte string, eight bytes at a time.
inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix64(h ^ w);
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = mix64(h ^ w ^ 0xFF);
  }
  return h;
}

// A map from a pair of token ids to a value, built once and then only read.
template <typename Value>
class PairMap {
 public:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{kEmpty, Value{}});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(s.key, s.value);
  }

  // Inserts or overwrites.
  void insert(uint64_t k, const Value& value) {
    if (2 * (size_ + 1) > slots_.size()) reserve(size_ + 1);
    size_t i = mix64(k) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{k, value};
  }

  const Value* find(uint64_t k) const {
    if (slots_.empty()) return nullptr;
    size_t i = mix64(k) & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Value value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// A bounded cache from byte strings to short id sequences. When full it starts over, which keeps the
// hot words of the current text and bounds memory.
class PieceCache {
 public:
  explicit PieceCache(size_t capacity = 1 << 16) : slots_(2 * capacity), capacity_(capacity) {}

  // The cached ids of `piece` (hash `h`), or false.
  bool find(std::string_view piece, uint64_t h, std::vector<int32_t>& out) const {
    size_t i = h & (slots_.size() - 1);
    while (slots_[i].length != kEmpty) {
      const Slot& s = slots_[i];
      if (s.hash == h && s.length == piece.size() && std::memcmp(keys_.data() + s.key, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids, ids_.begin() + s.ids + s.count);
        return true;
      }
      i = (i + 1) & (slots_.size() - 1);
    }
    return false;
  }

  void insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t count) {
    if (size_ >= capacity_) clear();
    size_t i = h & (slots_.size() - 1);
    while (slots_[i].length != kEmpty) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{h, uint32_t(keys_.size()), uint32_t(piece.size()), uint32_t(ids_.size()), uint32_t(count)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + count);
    ++size_;
  }

  void clear() {
    for (Slot& s : slots_) s.length = kEmpty;
    keys_.clear();
    ids_.clear();
    size_ = 0;
  }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  struct Slot {
    uint64_t hash = 0;
    uint32_t key = 0, length = kEmpty, ids = 0, count = 0;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t capacity_;
  size_t size_ = 0;
};

// An index from strings to their position in a vector the caller owns (a vocabulary). Lookups take a
// string_view and allocate nothing.
class StringIndex {
 public:
  // Returns false (and indexes nothing more) if some string appears twice; `duplicate` gets its ids.
  bool build(const std::vector<std::string>& strings, int32_t* first = nullptr, int32_t* second = nullptr) {
    size_t capacity = 16;
    while (capacity < 2 * strings.size()) capacity *= 2;
    slots_.assign(capacity, -1);
    mask_ = capacity - 1;
    for (size_t id = 0; id < strings.size(); ++id) {
      if (strings[id].empty()) continue;  // nothing looks an empty string up
      size_t i = hash_bytes(strings[id]) & mask_;
      while (slots_[i] >= 0) {
        if (strings[static_cast<size_t>(slots_[i])] == strings[id]) {
          if (first) *first = slots_[i];
          if (second) *second = static_cast<int32_t>(id);
          return false;
        }
        i = (i + 1) & mask_;
      }
      slots_[i] = static_cast<int32_t>(id);
    }
    return true;
  }

  int32_t find(const std::vector<std::string>& strings, std::string_view key) const {
    if (slots_.empty()) return -1;
    size_t i = hash_bytes(key) & mask_;
    while (slots_[i] >= 0) {
      if (strings[static_cast<size_t>(slots_[i])] == key) return slots_[i];
      i = (i + 1) & mask_;
    }
    return -1;
  }

 private:
  std::vector<int32_t> slots_;
  size_t mask_ = 0;
};

}  // namespace attend::tokenize

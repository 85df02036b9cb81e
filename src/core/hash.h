// FNV-1a over bytes, 64 bits: the cheap, stable hash that names what a cache was made from (the token cache's
// tokenizer and files, the prefix cache's blocks of tokens). Not for keys an adversary chooses.
#pragma once

#include <cstdint>
#include <string_view>

namespace attend {

struct Fnv1a {
  // The start value the token caches on disk were keyed with (one digit short of FNV's published offset basis;
  // any start value hashes as well, and changing it would make every written cache stale).
  uint64_t hash = 1469598103934665603ull;

  void add(std::string_view bytes) {
    for (const unsigned char c : bytes) hash = (hash ^ c) * 1099511628211ull;
  }
  // The eight bytes of v, lowest first.
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) hash = (hash ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
};

inline uint64_t fnv1a(std::string_view bytes) {
  Fnv1a f;
  f.add(bytes);
  return f.hash;
}

}  // namespace attend

// A seeded, counter-based random number generator (Philox4x32-10, Salmon et al. 2011).
//
// The n-th random number of a stream is a pure function of (seed, n), so a kernel that draws number
// `offset + i` for element i gets the same values whatever the thread count or the order of work.
// Dropout uses this to regenerate its mask in backward instead of storing it.
#pragma once

#include <array>
#include <cstdint>

namespace attend {

// Philox4x32-10: 4 random 32-bit words from a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The i-th 32-bit word of stream `seed` (stateless).
uint32_t random_u32(uint64_t seed, uint64_t i);
// The i-th uniform float in [0, 1) of stream `seed`, with 24 random bits.
float random_uniform(uint64_t seed, uint64_t i);

// Uniforms number first, first + 1, ..., first + n − 1 of stream `seed` (exactly random_uniform's), each
// Philox block computed once for its four numbers.
void random_uniforms(uint64_t seed, uint64_t first, int64_t n, float* out);

// A sequential view of one stream: draws numbers offset, offset+1, ... The whole state is
// (seed, offset), so it can be saved in a checkpoint and restored exactly.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}

  uint32_t next_u32() { return random_u32(seed_, offset_++); }
  uint64_t next_u64();
  float uniform() { return random_uniform(seed_, offset_++); }  // [0, 1)
  double uniform_double();                                      // [0, 1), 53 random bits
  float normal(float mean = 0.0f, float stddev = 1.0f);         // Box-Muller
  uint64_t below(uint64_t n);                                   // uniform integer in [0, n), unbiased

  // Reserves `count` numbers for a kernel and returns the first one's index (the kernel then draws
  // random_u32(seed(), first + i) for its element i).
  uint64_t reserve(uint64_t count) {
    uint64_t first = offset_;
    offset_ += count;
    return first;
  }

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }

 private:
  uint64_t seed_;
  uint64_t offset_;
};

}  // namespace attend

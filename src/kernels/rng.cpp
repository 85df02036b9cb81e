#include <attend/rng.h>

#include <cmath>
#include <numbers>

namespace attend {

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
// ten rounds of two 32x32->64 multiplications mixed with the key, which is bumped by the Weyl
// constants each round. It passes BigCrush and is what cuRAND and PyTorch use for dropout.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{kMul0} * c[0];
    uint64_t p1 = uint64_t{kMul1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

uint32_t random_u32(uint64_t seed, uint64_t i) {
  // One Philox block yields four words: block i/4, word i%4.
  uint64_t block = i >> 2;
  auto words = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u},
                          {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return words[i & 3];
}

float random_uniform(uint64_t seed, uint64_t i) {
  return static_cast<float>(random_u32(seed, i) >> 8) * 0x1.0p-24f;
}

void random_uniforms(uint64_t seed, uint64_t first, int64_t n, float* out) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  int64_t k = 0;
  while (k < n) {
    const uint64_t index = first + static_cast<uint64_t>(k), block = index >> 2;
    const auto words = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}, key);
    for (uint64_t w = index & 3; w < 4 && k < n; ++w, ++k) out[k] = static_cast<float>(words[w] >> 8) * 0x1.0p-24f;
  }
}

uint64_t Rng::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double Rng::uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

float Rng::normal(float mean, float stddev) {
  // Box-Muller with u1 in (0, 1] so the logarithm is finite.
  double u1 = 1.0 - uniform_double();
  double u2 = uniform_double();
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return mean + stddev * static_cast<float>(z);
}

uint64_t Rng::below(uint64_t n) {
  // Rejection sampling (Lemire's threshold) keeps every value exactly equally likely.
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

}  // namespace attend

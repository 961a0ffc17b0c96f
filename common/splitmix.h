// SplitMix64: a tiny, fully specified PRNG and hash. Tessera uses it wherever
// a value must be reproducible across machines and library versions (data
// order, synthetic tasks, weight init): std:: distributions are not.
#ifndef TESSERA_COMMON_SPLITMIX_H_
#define TESSERA_COMMON_SPLITMIX_H_

#include <cstdint>

namespace tessera {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Hash of several words: order matters.
inline uint64_t HashWords(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return SplitMix64(SplitMix64(SplitMix64(SplitMix64(a) ^ b) ^ c) ^ d);
}

class SplitMixRng {
 public:
  explicit SplitMixRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the modulo bias is below 2^-40 for n < 2^24.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_SPLITMIX_H_

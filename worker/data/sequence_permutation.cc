// The keyed Feistel permutation (see sequence_permutation.h).
#include "worker/data/sequence_permutation.h"

#include "common/splitmix.h"

namespace tessera {

SequencePermutation::SequencePermutation(uint64_t key, uint64_t n) : key_(key), n_(n) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  half_bits_ = bits <= 1 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t SequencePermutation::Network(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t next = left ^ (HashWords(key_, round, right) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t SequencePermutation::At(uint64_t p) const {
  if (n_ <= 1) return 0;
  uint64_t x = Network(p);
  while (x >= n_) x = Network(x);
  return x;
}

}  // namespace tessera

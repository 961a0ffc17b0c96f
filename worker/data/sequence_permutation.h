// A pseudo-random permutation of [0, n) that is computed, not stored: the
// order in which one epoch of a data source visits its sequences. A source
// may hold billions of sequences, so a shuffled index table per epoch would
// not fit in memory; a keyed bijection gives position p's sequence in O(1)
// expected time instead. It is a balanced four-round Feistel network over
// the smallest even number of bits that covers n, with SplitMix64 as the
// round function, and cycle walking (apply again until the value falls
// below n), which keeps it a bijection on [0, n). The network's range is
// less than 4n, so a walk applies it fewer than four times on average.
#ifndef TESSERA_WORKER_DATA_SEQUENCE_PERMUTATION_H_
#define TESSERA_WORKER_DATA_SEQUENCE_PERMUTATION_H_

#include <cstdint>

namespace tessera {

class SequencePermutation {
 public:
  // A permutation of [0, n), n >= 1, chosen by `key`.
  SequencePermutation(uint64_t key, uint64_t n);
  // The element at position p, p in [0, n).
  uint64_t At(uint64_t p) const;

 private:
  uint64_t Network(uint64_t x) const;
  uint64_t key_;
  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_SEQUENCE_PERMUTATION_H_

// SequencePermutation is a bijection on [0, n) for sizes around powers of
// two and odd bit widths, differs between keys, and is not the identity.
#include "worker/data/sequence_permutation.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(SequencePermutationTest, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 8ull, 9ull, 255ull, 256ull, 257ull, 1000ull, 4097ull}) {
    SequencePermutation order(42, n);
    std::vector<int> hits(n, 0);
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t x = order.At(p);
      ASSERT_LT(x, n);
      ++hits[x];
    }
    for (uint64_t x = 0; x < n; ++x) EXPECT_EQ(hits[x], 1) << "n " << n << " x " << x;
  }
}

TEST(SequencePermutationTest, KeysGiveDifferentOrders) {
  SequencePermutation a(1, 1000), b(2, 1000);
  int same = 0, fixed = 0;
  for (uint64_t p = 0; p < 1000; ++p) {
    same += a.At(p) == b.At(p);
    fixed += a.At(p) == p;
  }
  EXPECT_LT(same, 20);
  EXPECT_LT(fixed, 20);
}

}  // namespace
}  // namespace tessera

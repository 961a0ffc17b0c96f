// Initialisation does not depend on how a parameter is sharded: filling each
// rank's shard and concatenating gives the 1-rank tensor bit for bit, for
// every small shape and world size. The draws look standard normal and
// differ between seeds and parameters.
#include "worker/model/param_init.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/fsdp/shard_layout.h"

namespace tessera {
namespace {

std::vector<float> FillWhole(int64_t rows, int64_t cols, uint64_t seed, uint64_t param,
                             float std) {
  std::vector<float> out(rows * cols, -7.f);  // poisoned
  FillInit(out.data(), rows * cols, seed, param, 0, std, 1.f);
  return out;
}

TEST(ParamInit, ShardedFillsConcatenateToTheUnshardedTensor) {
  const uint64_t seed = (static_cast<uint64_t>(std::random_device()()) << 32) | 0x9e37u;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (int64_t rows = 0; rows <= 9; ++rows) {
    for (int64_t cols : {1, 3}) {
      const std::vector<float> whole = FillWhole(rows, cols, seed, 4, 0.02f);
      for (int world = 1; world <= 5; ++world) {
        std::vector<float> joined;
        for (int rank = 0; rank < world; ++rank) {
          ShardLayout l{rows, cols, world, rank};
          std::vector<float> shard(l.shard_numel(), -7.f);
          FillInit(shard.data(), l.shard_numel(), seed, 4, l.first_elem(), 0.02f, 1.f);
          joined.insert(joined.end(), shard.begin(), shard.end());
        }
        ASSERT_EQ(joined.size(), whole.size());
        for (size_t i = 0; i < whole.size(); ++i) {
          // Bitwise equality: the value is a pure function of the element index.
          ASSERT_EQ(joined[i], whole[i]) << "rows " << rows << " world " << world << " i " << i;
        }
      }
    }
  }
}

// A fill large enough to be split across threads gives, element for element,
// the bits InitNormal gives for that index, also for an uneven element count
// and a shard that starts mid-tensor.
TEST(ParamInit, ThreadedFillsEqualTheElementwiseDraws) {
  const uint64_t seed = (static_cast<uint64_t>(std::random_device()()) << 32) | 0x51u;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t count = 3 * (int64_t{1} << 22) + 12345, first = 777;
  std::vector<float> out(count, -7.f);
  FillInit(out.data(), count, seed, 9, first, 0.5f, 1.f);
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[i], 0.5f * InitNormal(seed, 9, static_cast<uint64_t>(first + i))) << "i " << i;
  }
  FillInit(out.data(), count, seed, 9, first, 0.f, 3.f);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out[i], 3.f) << "i " << i;
}

TEST(ParamInit, DrawsAreStandardNormalAndIndependentAcrossParams) {
  const int64_t n = 200000;
  std::vector<float> a = FillWhole(n, 1, 99, 0, 1.f);
  std::vector<float> b = FillWhole(n, 1, 99, 1, 1.f);
  double sum = 0, sum_sq = 0, cross = 0, fourth = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(a[i]));
    sum += a[i];
    sum_sq += a[i] * a[i];
    fourth += std::pow(a[i], 4);
    cross += a[i] * b[i];
  }
  // Sampling error of n = 2e5 draws: mean and correlation ~0.0022 (1 sigma),
  // variance ~0.0032; bounds are about 5 sigma.
  EXPECT_NEAR(sum / n, 0.0, 0.012);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.016);
  EXPECT_NEAR(fourth / n, 3.0, 0.15);  // normal kurtosis, not uniform (1.8)
  EXPECT_NEAR(cross / n, 0.0, 0.012);
}

TEST(ParamInit, SeedStdAndConstantAreHonoured) {
  std::vector<float> a = FillWhole(64, 1, 1, 3, 0.02f);
  std::vector<float> b = FillWhole(64, 1, 2, 3, 0.02f);
  std::vector<float> unit = FillWhole(64, 1, 1, 3, 1.f);
  EXPECT_NE(a, b);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(a[i], 0.02f * unit[i]);
  std::vector<float> ones = FillWhole(5, 1, 1, 3, 0.f);
  for (float v : ones) EXPECT_EQ(v, 1.f);
}

}  // namespace
}  // namespace tessera

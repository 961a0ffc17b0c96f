// The mixture's cycle: quotas that follow the weights, slots dealt so that
// every window tracks them, At() consistent across cycles, and the weight
// errors named by field.
#include "common/data_mixture.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(MixtureQuotasTest, FollowTheWeightsAndFillTheCycle) {
  absl::StatusOr<std::vector<int64_t>> q = MixtureQuotas({5, 3, 2}, "data.sources");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, (std::vector<int64_t>{32768, 19661, 13107}));
  q = MixtureQuotas({1, 1, 1}, "data.sources");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)[0] + (*q)[1] + (*q)[2], kMixtureCycleSlots);
  EXPECT_EQ(*q, (std::vector<int64_t>{21846, 21845, 21845}));  // the remainder to the first
}

TEST(MixtureQuotasTest, RefuseBadWeightsNamingTheField) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {0.0, -1.0, inf, nan}) {
    absl::StatusOr<std::vector<int64_t>> q = MixtureQuotas({1, 2, bad}, "data.sources");
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(q.status().message().rfind("data.sources[2].weight: must be finite and > 0", 0), 0u)
        << q.status();
  }
  absl::StatusOr<std::vector<int64_t>> tiny = MixtureQuotas({1, 1e-6}, "data.sources");
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("data.sources[1].weight: 1e-06 is"), std::string::npos)
      << tiny.status();
  EXPECT_FALSE(MixtureQuotas({}, "data.sources").ok());
  EXPECT_FALSE(MixtureQuotas({1e308, 1e308}, "data.sources").ok());  // the sum overflows
}

TEST(MixtureScheduleTest, EveryWindowTracksTheWeightsWithinTwoSlots) {
  absl::StatusOr<MixtureSchedule> s = MixtureSchedule::Create({0.5, 0.3, 0.2}, "data.sources");
  ASSERT_TRUE(s.ok()) << s.status();
  const std::vector<double> share = {0.5, 0.3, 0.2};
  // Windows of several lengths at several offsets, including ones that
  // straddle a cycle boundary.
  for (int64_t length : {10, 97, 1000, 65536}) {
    for (int64_t start : {int64_t{0}, int64_t{12345}, kMixtureCycleSlots - 50, int64_t{3} << 20}) {
      std::vector<int64_t> count(3, 0);
      for (int64_t k = start; k < start + length; ++k) ++count[s->At(k).source];
      for (int i = 0; i < 3; ++i) {
        EXPECT_LE(std::abs(count[i] - length * share[i]), 2.0)
            << "source " << i << " window " << start << "+" << length;
      }
    }
  }
}

TEST(MixtureScheduleTest, OrdinalsCountEachSourcesEarlierSlotsAcrossCycles) {
  absl::StatusOr<MixtureSchedule> s = MixtureSchedule::Create({3, 1, 7, 0.25}, "data.sources");
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int64_t> seen(4, 0);
  for (int64_t k = 0; k < 3 * kMixtureCycleSlots + 100; ++k) {
    const MixtureSchedule::Draw d = s->At(k);
    ASSERT_EQ(d.ordinal, seen[d.source]) << "slot " << k;
    ++seen[d.source];
  }
}

}  // namespace
}  // namespace tessera

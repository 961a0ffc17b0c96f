// The deduplication rule for restarted jobs: per step, the latest attempt's
// record counts, whatever order the records arrive in.
#include "common/step_history.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::StepMetrics Step(int step, int attempt, float loss, int64_t tokens = 10) {
  v1::StepMetrics m;
  m.set_step(step);
  m.set_attempt(attempt);
  m.set_loss(loss);
  m.set_tokens(tokens);
  m.set_step_time_s(0.5);
  return m;
}

TEST(StepHistory, EveryStepOnceKeepingTheLatestAttempt) {
  // Attempt 0 ran steps 0-5, attempt 1 resumed at 3 and failed after 4,
  // attempt 2 resumed at 4 and finished at 7.
  std::vector<v1::StepMetrics> records;
  for (int s = 0; s <= 5; ++s) records.push_back(Step(s, 0, 10.f + s));
  for (int s = 3; s <= 4; ++s) records.push_back(Step(s, 1, 20.f + s));
  for (int s = 4; s <= 7; ++s) records.push_back(Step(s, 2, 30.f + s));
  for (int shuffle = 0; shuffle < 2; ++shuffle) {
    if (shuffle) std::shuffle(records.begin(), records.end(), std::mt19937(7));
    StepHistory history;
    for (const v1::StepMetrics& m : records) history.Add(m);
    ASSERT_EQ(history.steps().size(), 8u);
    for (int s = 0; s <= 7; ++s) {
      const v1::StepMetrics& kept = history.steps().at(s);
      const int want = s >= 4 ? 2 : s == 3 ? 1 : 0;
      EXPECT_EQ(kept.attempt(), want) << s;
      EXPECT_EQ(kept.loss(), (want == 0 ? 10.f : want == 1 ? 20.f : 30.f) + s) << s;
    }
    EXPECT_EQ(history.total_tokens(), 80.0);
    EXPECT_EQ(history.total_step_time_s(), 4.0);
  }
}

TEST(StepHistory, AnEarlierAttemptArrivingLateIsDropped) {
  StepHistory history;
  EXPECT_TRUE(history.Add(Step(2, 1, 1.f)));
  EXPECT_FALSE(history.Add(Step(2, 0, 9.f)));
  EXPECT_TRUE(history.Add(Step(2, 1, 1.5f)));  // a replay of the same attempt
  EXPECT_EQ(history.steps().at(2).loss(), 1.5f);
}

}  // namespace
}  // namespace tessera

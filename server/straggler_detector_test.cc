// The slow-rank rule: a steadily slow rank is named once, a recovered one is
// cleared once, one-rank jobs and noise around the median name nothing, and
// the window decides when and over what a rank is judged.
#include "server/straggler_detector.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

StragglerOptions Options(double threshold, int window) {
  StragglerOptions options;
  options.threshold = threshold;
  options.window_steps = window;
  return options;
}

// Feeds `steps` steps of `times` from `first_step` on; returns every change.
std::vector<StragglerChange> Feed(StragglerDetector& detector, int first_step, int steps,
                                  const std::vector<double>& times) {
  std::vector<StragglerChange> all;
  for (int step = first_step; step < first_step + steps; ++step) {
    for (const StragglerChange& c : detector.AddStep(step, times)) all.push_back(c);
  }
  return all;
}

TEST(StragglerDetector, SteadySlowRankIsNamedOnceWhenTheWindowFills) {
  StragglerDetector detector(4, Options(0.10, 50));
  const std::vector<double> times = {0.100, 0.100, 0.125, 0.100};
  // Not before the window holds 50 steps.
  EXPECT_TRUE(Feed(detector, 0, 49, times).empty());
  std::vector<StragglerChange> named = detector.AddStep(49, times);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_TRUE(named[0].slow);
  EXPECT_EQ(named[0].step, 49);
  EXPECT_EQ(named[0].window_steps, 50);
  EXPECT_DOUBLE_EQ(named[0].rank_compute_s, 0.125);
  EXPECT_DOUBLE_EQ(named[0].median_compute_s, 0.100);
  EXPECT_NEAR(named[0].slowdown, 0.25, 1e-12);
  // Still slow for hundreds of steps: no second warning.
  EXPECT_TRUE(Feed(detector, 50, 500, times).empty());
  ASSERT_EQ(detector.Slow().size(), 1u);
  EXPECT_EQ(detector.Slow()[0].rank, 2);
  EXPECT_EQ(detector.Slow()[0].step, 549);  // figures of the latest step
}

TEST(StragglerDetector, RecoveredRankIsClearedOnceWhenMostOfItsWindowIsFastAgain) {
  StragglerDetector detector(2, Options(0.10, 10));
  ASSERT_EQ(Feed(detector, 0, 10, {0.1, 0.2}).size(), 1u);
  // Recovered from step 10 on: the window's (lower) median turns fast once
  // half of its 10 steps are fast, at step 14.
  std::vector<StragglerChange> changes = Feed(detector, 10, 4, {0.1, 0.1});
  EXPECT_TRUE(changes.empty());
  changes = detector.AddStep(14, {0.1, 0.1});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_FALSE(changes[0].slow);
  EXPECT_EQ(changes[0].step, 14);
  EXPECT_NEAR(changes[0].slowdown, 0.0, 1e-12);
  EXPECT_TRUE(detector.Slow().empty());
  EXPECT_TRUE(Feed(detector, 15, 100, {0.1, 0.1}).empty());
}

TEST(StragglerDetector, WithTwoRanksTheSlowOneIsHeldAgainstTheFastOne) {
  // Against the two ranks' average (0.115) rank 1 would be only 4% slower.
  StragglerDetector detector(2, Options(0.10, 5));
  std::vector<StragglerChange> changes = Feed(detector, 0, 5, {0.100, 0.130});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_NEAR(changes[0].slowdown, 0.30, 1e-12);
}

TEST(StragglerDetector, OneRankJobsNeverNameAnything) {
  StragglerDetector detector(1, Options(0.01, 5));
  EXPECT_TRUE(Feed(detector, 0, 100, {0.5}).empty());
  EXPECT_TRUE(detector.Slow().empty());
}

TEST(StragglerDetector, NoiseAroundTheMedianNamesNothing) {
  // Every rank's steps scatter +-10% around the same time (a single step
  // may well be 20% slower than the median rank's), and one step in ten of
  // a random rank is delayed threefold (a descheduled process).
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  std::uniform_int_distribution<int> pick(0, 7);
  StragglerDetector detector(8, Options(0.10, 50));
  for (int step = 0; step < 2000; ++step) {
    std::vector<double> times(8);
    for (double& t : times) t = 0.05 * jitter(rng);
    if (step % 10 == 0) times[pick(rng)] *= 3;
    EXPECT_TRUE(detector.AddStep(step, times).empty()) << "step " << step;
  }
}

TEST(StragglerDetector, SlowStepsInTheMinorityOfTheWindowNameNothing) {
  // Rank 0 is twice as slow on 24 of every 50 steps: its median stays fast.
  StragglerDetector detector(3, Options(0.10, 50));
  for (int step = 0; step < 500; ++step) {
    const double rank0 = step % 50 < 24 ? 0.2 : 0.1;
    EXPECT_TRUE(detector.AddStep(step, {rank0, 0.1, 0.1}).empty()) << "step " << step;
  }
  // On 26 of 50 it is named.
  StragglerDetector majority(3, Options(0.10, 50));
  int named = 0;
  for (int step = 0; step < 50; ++step) {
    const double rank0 = step < 26 ? 0.2 : 0.1;
    named += static_cast<int>(majority.AddStep(step, {rank0, 0.1, 0.1}).size());
  }
  EXPECT_EQ(named, 1);
}

TEST(StragglerDetector, ARankThatTurnsSlowIsNamedOnceMostOfItsWindowIsSlow) {
  StragglerDetector detector(3, Options(0.10, 20));
  EXPECT_TRUE(Feed(detector, 0, 100, {0.1, 0.1, 0.1}).empty());
  // Slow from step 100: 10 slow steps of 20 are not yet a majority.
  EXPECT_TRUE(Feed(detector, 100, 10, {0.1, 0.1, 0.15}).empty());
  std::vector<StragglerChange> changes = detector.AddStep(110, {0.1, 0.1, 0.15});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_EQ(changes[0].step, 110);
}

TEST(StragglerDetector, BetweenHalfTheThresholdAndTheThresholdNothingChanges) {
  StragglerDetector detector(2, Options(0.20, 5));
  // 8% slower: below the threshold, not named.
  EXPECT_TRUE(Feed(detector, 0, 20, {0.100, 0.108}).empty());
  // 30%: named.
  EXPECT_EQ(Feed(detector, 20, 20, {0.100, 0.130}).size(), 1u);
  // 15%: above half the threshold, so it stays named (no flapping).
  EXPECT_TRUE(Feed(detector, 40, 20, {0.100, 0.115}).empty());
  EXPECT_EQ(detector.Slow().size(), 1u);
  // 5%: cleared.
  std::vector<StragglerChange> changes = Feed(detector, 60, 20, {0.100, 0.105});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].slow);
}

TEST(StragglerDetector, TheRankAtTheThresholdIsNotNamed) {
  StragglerDetector detector(2, Options(0.25, 5));
  EXPECT_TRUE(Feed(detector, 0, 20, {0.1, 0.125}).empty());  // exactly 25%: not more
  EXPECT_EQ(Feed(detector, 20, 20, {0.1, 0.126}).size(), 1u);
}

TEST(StragglerDetector, SeveralSlowRanksAreEachNamedWhileTheMedianRankIsFast) {
  StragglerDetector detector(5, Options(0.10, 5));
  std::vector<StragglerChange> changes = Feed(detector, 0, 5, {0.3, 0.1, 0.1, 0.2, 0.1});
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].rank, 0);
  EXPECT_EQ(changes[1].rank, 3);
  // When most ranks are slow, they are the norm: nothing is named.
  StragglerDetector most(3, Options(0.10, 5));
  EXPECT_TRUE(Feed(most, 0, 20, {0.1, 0.2, 0.2}).empty());
}

TEST(StragglerDetector, StepsWithNothingMeasuredOrTheWrongRankCountAreIgnored) {
  StragglerDetector detector(2, Options(0.10, 5));
  EXPECT_TRUE(Feed(detector, 0, 20, {0.0, 0.0}).empty());
  EXPECT_TRUE(Feed(detector, 20, 20, {0.1, 0.2, 0.3}).empty());
  EXPECT_TRUE(detector.AddStep(40, {}).empty());
}

TEST(StragglerDetector, OptionsAreValidatedNamingTheFlag) {
  EXPECT_TRUE(ValidateStragglerOptions(StragglerOptions()).ok());
  absl::Status s = ValidateStragglerOptions(Options(0.0, 50));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slow_rank_threshold"), absl::string_view::npos) << s;
  EXPECT_FALSE(ValidateStragglerOptions(Options(-0.5, 50)).ok());
  EXPECT_FALSE(ValidateStragglerOptions(Options(11, 50)).ok());
  EXPECT_FALSE(ValidateStragglerOptions(Options(std::nan(""), 50)).ok());
  s = ValidateStragglerOptions(Options(0.1, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slow_rank_window_steps"), absl::string_view::npos) << s;
  EXPECT_FALSE(ValidateStragglerOptions(Options(0.1, 100001)).ok());
  EXPECT_TRUE(ValidateStragglerOptions(Options(0.01, 5)).ok());
  EXPECT_TRUE(ValidateStragglerOptions(Options(10, 100000)).ok());
}

}  // namespace
}  // namespace tessera

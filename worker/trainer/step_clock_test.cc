// StepClock on the CPU engine, whose marks are host-clock readings: laps are
// charged to the phase named when they close, same-phase laps share a mark,
// and host time is the wall time the timeline leaves out. Sleeps give lower
// bounds only, so the checks hold however slow the machine is.
#include "worker/trainer/step_clock.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(StepClockTest, ChargesEachLapToItsPhase) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(milliseconds(15));  // host work before the timeline
  ASSERT_TRUE(clock.Start(nullptr).ok());
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(clock.Lap(StepPhase::kForward, nullptr).ok());
  std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(clock.WaitLap(CollectiveSite::kForwardGather, nullptr).ok());
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(clock.Lap(StepPhase::kOptimizer, nullptr).ok());
  absl::StatusOr<StepPhaseTimes> t = clock.Finish(SecondsSince(t0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->forward_s, 0.020);
  EXPECT_GE(t->collective_s, 0.010);
  EXPECT_GE(t->optimizer_s, 0.005);
  EXPECT_EQ(t->loss_s, 0.0);
  EXPECT_EQ(t->backward_s, 0.0);
  EXPECT_GE(t->host_s, 0.015);
  // The phases and the host time add up to the wall time.
  const double timeline = t->forward_s + t->collective_s + t->optimizer_s;
  EXPECT_GE(t->host_s + timeline, 0.050);
}

TEST(StepClockTest, SamePhaseLapsShareAMarkSoLongStepsFit) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  for (int i = 0; i < 3 * Ops::kTimeMarks; ++i) {
    ASSERT_TRUE(clock.Lap(StepPhase::kBackward, nullptr).ok()) << i;
  }
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(clock.Lap(StepPhase::kBackward, nullptr).ok());
  absl::StatusOr<StepPhaseTimes> t = clock.Finish(1.0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->backward_s, 0.005);
}

TEST(StepClockTest, TooManyAlternatingLapsIsAnErrorNotACrash) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  absl::Status last;
  for (int i = 0; i < Ops::kTimeMarks && last.ok(); ++i) {
    last = i % 2 ? clock.Lap(StepPhase::kForward, nullptr)
                 : clock.WaitLap(CollectiveSite::kForwardGather, nullptr);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  // The clock starts over cleanly.
  ASSERT_TRUE(clock.Start(nullptr).ok());
  ASSERT_TRUE(clock.Lap(StepPhase::kLoss, nullptr).ok());
  EXPECT_TRUE(clock.Finish(1.0).ok());
}

// Each wait is charged to the collectives and to its site; consecutive
// waits at one site share a mark, waits at different sites do not, and the
// sites add up to collective_s.
TEST(StepClockTest, WaitsAreChargedToTheirSites) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  std::this_thread::sleep_for(milliseconds(4));
  ASSERT_TRUE(clock.WaitLap(CollectiveSite::kFirstGather, nullptr).ok());
  std::this_thread::sleep_for(milliseconds(6));
  ASSERT_TRUE(clock.Lap(StepPhase::kForward, nullptr).ok());
  std::this_thread::sleep_for(milliseconds(8));
  ASSERT_TRUE(clock.WaitLap(CollectiveSite::kHeadGather, nullptr).ok());
  std::this_thread::sleep_for(milliseconds(3));
  ASSERT_TRUE(clock.WaitLap(CollectiveSite::kHeadGather, nullptr).ok());  // extends the wait
  std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(clock.WaitLap(CollectiveSite::kFinalReduce, nullptr).ok());  // a new site
  absl::StatusOr<StepPhaseTimes> t = clock.Finish(1.0);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto at = [&](CollectiveSite site) { return t->collective_waits[static_cast<int>(site)]; };
  EXPECT_GE(at(CollectiveSite::kFirstGather), 0.004);
  EXPECT_GE(at(CollectiveSite::kHeadGather), 0.011);
  EXPECT_GE(at(CollectiveSite::kFinalReduce), 0.010);
  EXPECT_EQ(at(CollectiveSite::kForwardGather), 0.0);
  EXPECT_EQ(at(CollectiveSite::kAllReduce), 0.0);
  EXPECT_GE(t->forward_s, 0.006);
  double sites = 0.0;
  for (double w : t->collective_waits) sites += w;
  EXPECT_DOUBLE_EQ(sites, t->collective_s);
}

TEST(StepClockTest, WaitsAtOneSiteShareAMarkAndAlternatingSitesDoNot) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  for (int i = 0; i < 3 * Ops::kTimeMarks; ++i) {
    ASSERT_TRUE(clock.WaitLap(CollectiveSite::kGradientBuffer, nullptr).ok()) << i;
  }
  ASSERT_TRUE(clock.Finish(1.0).ok());
  ASSERT_TRUE(clock.Start(nullptr).ok());
  absl::Status last;
  for (int i = 0; i < Ops::kTimeMarks && last.ok(); ++i) {
    last = clock.WaitLap(i % 2 ? CollectiveSite::kForwardGather : CollectiveSite::kAllReduce,
                         nullptr);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
}

TEST(StepClockTest, ACollectiveLapMustNameItsSite) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  EXPECT_EQ(clock.Lap(StepPhase::kCollective, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// The StepPhases message carries each site in its own field.
TEST(StepClockTest, EachSiteHasItsOwnProtoField) {
  StepPhaseTimes t;
  for (int i = 0; i < kCollectiveSites; ++i) t.collective_waits[i] = 1.0 + i;
  const v1::CollectiveWaits w = CollectiveWaitsProto(t);
  EXPECT_EQ(w.first_gather_s(), 1.0);
  EXPECT_EQ(w.forward_gather_s(), 2.0);
  EXPECT_EQ(w.head_gather_s(), 3.0);
  EXPECT_EQ(w.backward_gather_s(), 4.0);
  EXPECT_EQ(w.gradient_buffer_s(), 5.0);
  EXPECT_EQ(w.gradient_reduce_s(), 6.0);
  EXPECT_EQ(w.final_reduce_s(), 7.0);
  EXPECT_EQ(w.all_reduce_s(), 8.0);
  // Every field is one of the sites: none is left at zero.
  EXPECT_EQ(w.GetDescriptor()->field_count(), kCollectiveSites);
}

TEST(StepClockTest, OutOfOrderUseIsRefused) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  EXPECT_EQ(clock.Lap(StepPhase::kForward, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(clock.Finish(1.0).status().code(), absl::StatusCode::kFailedPrecondition);
  // A timeline with no laps is all host time.
  ASSERT_TRUE(clock.Start(nullptr).ok());
  absl::StatusOr<StepPhaseTimes> t = clock.Finish(0.25);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->host_s, 0.25);
}

TEST(StepClockTest, ReopenReadsTheLastStepsLapsFromMarksRecordedAgain) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  StepClock clock(*ops);
  EXPECT_EQ(clock.Reopen().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(clock.Start(nullptr).ok());
  ASSERT_TRUE(clock.Lap(StepPhase::kForward, nullptr).ok());
  ASSERT_TRUE(clock.Lap(StepPhase::kBackward, nullptr).ok());
  ASSERT_TRUE(clock.Finish(1.0).ok());
  // A replay records marks 0, 1 and 2 again, as the captured step did; here
  // the forward lap takes at least 20 ms and the backward lap at least 5.
  ASSERT_TRUE(ops->MarkTime(0, nullptr).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(ops->MarkTime(1, nullptr).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(ops->MarkTime(2, nullptr).ok());
  ASSERT_TRUE(clock.Reopen().ok());
  absl::StatusOr<StepPhaseTimes> t = clock.Finish(1.0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->forward_s, 0.020);
  EXPECT_GE(t->backward_s, 0.005);
  EXPECT_EQ(t->loss_s, 0.0);
  EXPECT_EQ(t->optimizer_s, 0.0);
  EXPECT_EQ(t->collective_s, 0.0);
  // Each replay reopens the same laps.
  ASSERT_TRUE(clock.Reopen().ok());
  EXPECT_TRUE(clock.Finish(1.0).ok());
}

TEST(CpuOpsTimeMarksTest, UnrecordedOrOutOfRangeMarksAreRefused) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  EXPECT_EQ(ops->MarkTime(-1, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ops->MarkTime(Ops::kTimeMarks, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ops->SecondsBetween(0, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ops->MarkTime(0, nullptr).ok());
  ASSERT_TRUE(ops->MarkTime(1, nullptr).ok());
  absl::StatusOr<double> s = ops->SecondsBetween(0, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_GE(*s, 0.0);
}

}  // namespace
}  // namespace tessera

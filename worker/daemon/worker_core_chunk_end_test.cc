// Ending a RunSteps early through WorkerCore with a fake trainer: a hold
// stops the rank before the first step it has not begun; EndChunkAt after,
// at and before that step (before is FAILED_PRECONDITION: the rank cannot
// stop before a step it began, and the hold stays); a limit that arrives
// before its RunSteps, one left at a later RunSteps' first step (ignored),
// a hold between chunks, Abort of a held rank, and the commands out of
// order.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/worker_core.h"

namespace tessera {
namespace {

constexpr char kJob[] = "job-1";
constexpr auto kFailedPrecondition = absl::StatusCode::kFailedPrecondition;

WorkerCore::TrainerFactory Factory() {
  return [](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer());
  };
}

v1::SetupJobRequest SetupRequest() {
  v1::SetupJobRequest r;
  r.set_job_id(kJob);
  r.set_rank(0);
  r.set_world_size(1);
  r.mutable_spec()->set_steps(100000);
  r.mutable_spec()->mutable_model()->set_seq_len(8);
  r.mutable_spec()->mutable_data()->set_micro_batch_size(2);
  return r;
}

// A RunSteps on its own thread, counting the steps it reports.
class Chunk {
 public:
  Chunk(WorkerCore& core, int first_step, int num_steps)
      : thread_([this, &core, first_step, num_steps] {
          absl::Status s = core.RunSteps(kJob, first_step, num_steps, [this](const StepReport& r) {
            absl::MutexLock lock(&mu_);
            steps_.push_back(r.step);
          });
          absl::MutexLock lock(&mu_);
          status_ = s;
          done_ = true;
        }) {}
  ~Chunk() {
    if (thread_.joinable()) thread_.join();
  }
  void WaitForSteps(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return steps_.size() >= n; };
    ASSERT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }
  size_t steps() {
    absl::MutexLock lock(&mu_);
    return steps_.size();
  }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  // The call's status once it returned, and the steps it reported.
  absl::Status Join(std::vector<int>* steps = nullptr) {
    thread_.join();
    absl::MutexLock lock(&mu_);
    if (steps != nullptr) *steps = steps_;
    return status_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int> steps_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

std::vector<int> Range(int first, int end) {
  std::vector<int> v;
  for (int s = first; s < end; ++s) v.push_back(s);
  return v;
}

class ChunkEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(core_.SetupJob(SetupRequest()).ok());
    ASSERT_TRUE(core_.InitCollective(kJob, nullptr, "h", absl::Seconds(1)).ok());
  }
  // Holds a chunk that has reported some steps; the step the rank holds before.
  int HoldMidChunk(Chunk& chunk) {
    chunk.WaitForSteps(3);
    absl::StatusOr<int> held = core_.HoldSteps(kJob);
    EXPECT_TRUE(held.ok()) << held.status();
    return held.ok() ? *held : -1;
  }

  WorkerCore core_{Factory()};
};

TEST_F(ChunkEndTest, AHeldRankBeginsNoStepAndEndsAfterTheLimit) {
  Chunk chunk(core_, 0, 100000);
  const int held = HoldMidChunk(chunk);
  ASSERT_GE(held, 3);
  // The step in flight when the hold came may finish; no other begins.
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_LE(chunk.steps(), static_cast<size_t>(held));
  EXPECT_FALSE(chunk.done());
  ASSERT_TRUE(core_.EndChunkAt(kJob, held + 3).ok());
  std::vector<int> steps;
  ASSERT_TRUE(chunk.Join(&steps).ok());
  EXPECT_EQ(steps, Range(0, held + 3));
  EXPECT_EQ(core_.Status().steps_done(), held + 3);
  EXPECT_EQ(core_.Status().phase(), "collective_ready");
  // The limit was this chunk's: the next runs to its own end.
  std::vector<int> next;
  ASSERT_TRUE(core_.RunSteps(kJob, held + 3, 4, [&](const StepReport& r) {
                     next.push_back(r.step);
                   }).ok());
  EXPECT_EQ(next, Range(held + 3, held + 7));
}

TEST_F(ChunkEndTest, ALimitAtTheFirstStepNotBegunEndsTheChunkThere) {
  Chunk chunk(core_, 0, 100000);
  const int held = HoldMidChunk(chunk);
  ASSERT_TRUE(core_.EndChunkAt(kJob, held).ok());
  std::vector<int> steps;
  ASSERT_TRUE(chunk.Join(&steps).ok());
  EXPECT_EQ(steps, Range(0, held));
  EXPECT_EQ(core_.Status().steps_done(), held);
}

TEST_F(ChunkEndTest, ALimitBeforeAStepAlreadyBegunIsRefusedAndTheHoldStays) {
  Chunk chunk(core_, 0, 100000);
  const int held = HoldMidChunk(chunk);
  absl::Status refused = core_.EndChunkAt(kJob, held - 1);
  EXPECT_EQ(refused.code(), kFailedPrecondition);
  EXPECT_NE(refused.message().find(absl::StrCat("already begun step ", held - 1)),
            std::string::npos)
      << refused;
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(chunk.done());  // still held, not ended
  EXPECT_LE(chunk.steps(), static_cast<size_t>(held));
  ASSERT_TRUE(core_.EndChunkAt(kJob, held + 1).ok());
  std::vector<int> steps;
  ASSERT_TRUE(chunk.Join(&steps).ok());
  EXPECT_EQ(steps, Range(0, held + 1));
}

TEST_F(ChunkEndTest, ALimitThatArrivesBeforeItsRunStepsAppliesToIt) {
  ASSERT_TRUE(core_.EndChunkAt(kJob, 2).ok());
  std::vector<int> steps;
  ASSERT_TRUE(core_.RunSteps(kJob, 0, 10, [&](const StepReport& r) {
                     steps.push_back(r.step);
                   }).ok());
  EXPECT_EQ(steps, Range(0, 2));
}

TEST_F(ChunkEndTest, ALimitAtALaterRunStepsFirstStepDoesNotApplyToIt) {
  ASSERT_TRUE(core_.RunSteps(kJob, 0, 2, [](const StepReport&) {}).ok());
  // As when a chunk ended on its own just before the end was decided.
  ASSERT_TRUE(core_.EndChunkAt(kJob, 2).ok());
  std::vector<int> steps;
  ASSERT_TRUE(core_.RunSteps(kJob, 2, 3, [&](const StepReport& r) {
                     steps.push_back(r.step);
                   }).ok());
  EXPECT_EQ(steps, Range(2, 5));
}

TEST_F(ChunkEndTest, AHoldBetweenChunksHoldsTheNextChunksFirstStep) {
  ASSERT_TRUE(core_.RunSteps(kJob, 0, 2, [](const StepReport&) {}).ok());
  absl::StatusOr<int> held = core_.HoldSteps(kJob);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, 2);
  Chunk chunk(core_, 2, 10);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(chunk.steps(), 0u);
  ASSERT_TRUE(core_.EndChunkAt(kJob, 4).ok());
  std::vector<int> steps;
  ASSERT_TRUE(chunk.Join(&steps).ok());
  EXPECT_EQ(steps, Range(2, 4));
}

TEST_F(ChunkEndTest, AbortReleasesAHeldRank) {
  Chunk chunk(core_, 0, 100000);
  HoldMidChunk(chunk);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(core_.Abort(kJob, "operator").ok());
  EXPECT_EQ(chunk.Join().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(core_.Status().phase(), "idle");
  EXPECT_TRUE(core_.WaitUntilIdle(absl::ZeroDuration()));
}

TEST(ChunkEnd, OutOfOrderOrForAnotherJobIsFailedPrecondition) {
  WorkerCore core(Factory());
  EXPECT_EQ(core.HoldSteps(kJob).status().code(), kFailedPrecondition);  // idle
  EXPECT_EQ(core.EndChunkAt(kJob, 1).code(), kFailedPrecondition);
  EXPECT_TRUE(core.WaitUntilIdle(absl::ZeroDuration()));
  ASSERT_TRUE(core.SetupJob(SetupRequest()).ok());
  EXPECT_FALSE(core.WaitUntilIdle(absl::Milliseconds(10)));
  EXPECT_EQ(core.HoldSteps(kJob).status().code(), kFailedPrecondition);  // not joined
  EXPECT_EQ(core.EndChunkAt(kJob, 1).code(), kFailedPrecondition);
  ASSERT_TRUE(core.InitCollective(kJob, nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(core.HoldSteps("job-2").status().code(), kFailedPrecondition);
  EXPECT_EQ(core.EndChunkAt("job-2", 1).code(), kFailedPrecondition);
  ASSERT_TRUE(core.HoldSteps(kJob).ok());
  ASSERT_TRUE(core.Abort(kJob, "done").ok());
}

}  // namespace
}  // namespace tessera

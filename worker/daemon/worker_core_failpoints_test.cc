// The worker's failpoint call sites, driven through WorkerCore with a fake
// trainer: fail_collective turns one step into ABORTED (and only once), slow
// delays a step, hang holds a step until the job is aborted, exit kills the
// process before the step, corrupt_checkpoint damages the file the rank's
// manifest names so reading it back is DATA_LOSS, and failpoints armed for
// another rank never fire here.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "formats/checkpoint_io.h"
#include "gtest/gtest.h"
#include "worker/daemon/failpoints.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/worker_core.h"

namespace tessera {
namespace {

constexpr char kJob[] = "job-1";

WorkerCore::TrainerFactory Factory() {
  return [](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer());
  };
}

std::unique_ptr<Failpoints> Arm(const std::string& spec) {
  absl::StatusOr<std::vector<Failpoint>> parsed = Failpoints::Parse(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return std::make_unique<Failpoints>(parsed.ok() ? *parsed : std::vector<Failpoint>{});
}

// Set up and joined as `rank` of 2 (the fake trainer needs no peers).
void StartJob(WorkerCore& core, int rank) {
  v1::SetupJobRequest request;
  request.set_job_id(kJob);
  request.set_rank(rank);
  request.set_world_size(2);
  request.mutable_spec()->mutable_model()->set_seq_len(8);
  request.mutable_spec()->mutable_data()->set_micro_batch_size(2);
  ASSERT_TRUE(core.SetupJob(request).ok());
  ASSERT_TRUE(core.InitCollective(kJob, nullptr, "h", absl::Seconds(1)).ok());
}

absl::Status RunFor(WorkerCore& core, int first, int n, std::vector<int>* steps = nullptr) {
  return core.RunSteps(kJob, first, n, [steps](const StepReport& r) {
    if (steps != nullptr) steps->push_back(r.step);
  });
}

TEST(WorkerCoreFailpoints, FailCollectiveAbortsThatStepOnceAndOnlyOnItsRank) {
  std::unique_ptr<Failpoints> failpoints = Arm("fail_collective@rank=1,step=3");
  WorkerCore core(Factory());
  core.set_failpoints(failpoints.get());
  StartJob(core, 1);
  std::vector<int> steps;
  absl::Status status = RunFor(core, 0, 6, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_NE(status.message().find("step 3: the collective failed on rank 1"), std::string::npos)
      << status;
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(core.healthy());  // a failed collective is not the worker's fault
  // The step did not run; running it again succeeds (the failpoint fired).
  ASSERT_TRUE(RunFor(core, 3, 3, &steps).ok());
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2, 3, 4, 5}));

  // Armed for rank 1: rank 0 runs straight through.
  std::unique_ptr<Failpoints> other = Arm("fail_collective@rank=1,step=3;hang@rank=1,step=1");
  WorkerCore rank0(Factory());
  rank0.set_failpoints(other.get());
  StartJob(rank0, 0);
  EXPECT_TRUE(RunFor(rank0, 0, 6).ok());
}

TEST(WorkerCoreFailpoints, SlowDelaysItsStep) {
  std::unique_ptr<Failpoints> failpoints = Arm("slow@rank=0,step=2,ms=300");
  WorkerCore core(Factory());
  core.set_failpoints(failpoints.get());
  StartJob(core, 0);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(RunFor(core, 0, 4).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
}

// A slow range holds each of its steps, and the delay is the rank's own
// step time (host time), so the coordinator sees this rank as the slow one.
TEST(WorkerCoreFailpoints, ASlowRangeAddsItsDelayToTheRanksOwnStepTime) {
  std::unique_ptr<Failpoints> failpoints = Arm("slow@rank=0,step=1,ms=40,steps=2");
  WorkerCore core(Factory());
  core.set_failpoints(failpoints.get());
  StartJob(core, 0);
  std::vector<StepReport> reports;
  ASSERT_TRUE(core.RunSteps(kJob, 0, 4, [&](const StepReport& r) { reports.push_back(r); }).ok());
  ASSERT_EQ(reports.size(), 4u);
  const double fake_step_s = 0.005;  // FakeTrainer's reported step time
  for (int step : {0, 3}) {
    EXPECT_DOUBLE_EQ(reports[step].compute_time_s, fake_step_s) << step;
    EXPECT_DOUBLE_EQ(reports[step].phases.host_s, 0.0) << step;
  }
  for (int step : {1, 2}) {
    EXPECT_GE(reports[step].compute_time_s, fake_step_s + 0.040) << step;
    EXPECT_GE(reports[step].phases.host_s, 0.040) << step;
    EXPECT_NEAR(reports[step].compute_time_s - reports[step].phases.host_s, fake_step_s, 1e-9);
  }
}

TEST(WorkerCoreFailpoints, HangHoldsTheStepUntilTheJobIsAborted) {
  std::unique_ptr<Failpoints> failpoints = Arm("hang@step=2");
  WorkerCore core(Factory());
  core.set_failpoints(failpoints.get());
  StartJob(core, 0);
  std::atomic<bool> returned{false};
  absl::Status status;
  std::thread runner([&] {
    status = RunFor(core, 0, 5);
    returned = true;
  });
  while (core.Status().steps_done() < 2) absl::SleepFor(absl::Milliseconds(1));
  // Three more 5 ms steps would have finished long before this if step 2
  // had not been held.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(core.Status().steps_done(), 2);
  EXPECT_EQ(core.Status().phase(), "running");  // heartbeats would say so
  ASSERT_TRUE(core.Abort(kJob, "step watchdog").ok());
  runner.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(core.Status().phase(), "idle");
}

TEST(WorkerCoreFailpointsDeathTest, ExitKillsTheProcessBeforeItsStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::unique_ptr<Failpoints> failpoints = Arm("exit@rank=0,step=2");
        WorkerCore core(Factory());
        core.set_failpoints(failpoints.get());
        StartJob(core, 0);
        RunFor(core, 0, 4, nullptr).IgnoreError();
        std::fprintf(stderr, "survived\n");
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint exit@rank=0,step=2 fired");
}

TEST(WorkerCoreFailpoints, CorruptCheckpointDamagesTheRanksFileSoReadingItIsDataLoss) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/corrupt-ckpt";
  // The fake trainer writes no files; put a real verified rank file where
  // the failpoint will look for it (as the real trainer would have).
  constexpr int kStep = 4;
  {
    absl::StatusOr<std::unique_ptr<RankCheckpointWriter>> writer =
        RankCheckpointWriter::Begin(root, kStep, 0, 2, ManifestSpec{std::string(64, 'a')});
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)
                    ->AddFile("rank-0.state",
                              [](DurableFileWriter& out) {
                                return out.Append(std::string(4096, 'x'));
                              })
                    .ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  auto read_state = [&]() -> absl::Status {
    absl::StatusOr<RankManifest> manifest = ReadRankManifest(root, kStep, 0);
    if (!manifest.ok()) return manifest.status();
    return ReadVerifiedFile(root, *manifest, "rank-0.state").status();
  };
  ASSERT_TRUE(read_state().ok());

  std::unique_ptr<Failpoints> failpoints = Arm("corrupt_checkpoint@rank=0,step=4");
  WorkerCore core(Factory());
  core.set_failpoints(failpoints.get());
  StartJob(core, 0);
  ASSERT_TRUE(RunFor(core, 0, kStep).ok());
  ASSERT_TRUE(core.Checkpoint(kJob, kStep, root).ok());
  // The failpoint fires once the write is durable, when it is awaited.
  ASSERT_TRUE(core.AwaitCheckpoint(kJob, kStep).ok());
  const absl::Status damaged = read_state();
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("rank-0.state"), std::string::npos) << damaged;
  EXPECT_TRUE(core.healthy());
}

}  // namespace
}  // namespace tessera

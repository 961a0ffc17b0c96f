// The worker's command state machine with a fake trainer: the happy path,
// every out-of-order command, wrong job ids, abort from each state and
// mid-run, consecutive steps, health, and the single compute thread.
#include "worker/daemon/worker_core.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"

namespace tessera {
namespace {

WorkerCore::TrainerFactory Factory(FakeTrainerOptions options = {}) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer(options));
  };
}

v1::SetupJobRequest SetupRequest(const std::string& job) {
  v1::SetupJobRequest r;
  r.set_job_id(job);
  r.set_rank(0);
  r.set_world_size(1);
  r.mutable_spec()->mutable_model()->set_seq_len(8);
  r.mutable_spec()->mutable_data()->set_micro_batch_size(2);
  return r;
}

absl::Status RunFor(WorkerCore& core, const std::string& job, int first, int n,
                 std::vector<StepReport>* out = nullptr) {
  return core.RunSteps(job, first, n, [out](const StepReport& r) {
    if (out) out->push_back(r);
  });
}

TEST(WorkerCore, HappyPathRunsOnOneComputeThread) {
  FakeTrainer::ResetCallingThreads();
  WorkerCore core(Factory());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  std::vector<StepReport> reports;
  ASSERT_TRUE(RunFor(core, "job-1", 0, 3, &reports).ok());
  ASSERT_TRUE(RunFor(core, "job-1", 3, 2, &reports).ok());
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_EQ(reports[4].step, 4);
  EXPECT_EQ(reports[0].tokens, 16);
  ASSERT_TRUE(core.Checkpoint("job-1", 5, "/tmp/x").ok());
  ASSERT_TRUE(core.Abort("job-1", "done").ok());
  EXPECT_EQ(core.Status().phase(), "idle");
  auto threads = FakeTrainer::CallingThreads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(*threads.begin(), core.compute_thread_id());
}

TEST(WorkerCore, OutOfOrderCommandsAreFailedPrecondition) {
  WorkerCore core(Factory());
  const auto kFP = absl::StatusCode::kFailedPrecondition;
  EXPECT_EQ(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).code(), kFP);
  EXPECT_EQ(RunFor(core, "job-1", 0, 1).code(), kFP);
  EXPECT_EQ(core.Checkpoint("job-1", 0, "/tmp").status().code(), kFP);
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  EXPECT_EQ(core.SetupJob(SetupRequest("job-2")).status().code(), kFP);  // busy
  EXPECT_EQ(RunFor(core, "job-1", 0, 1).code(), kFP);                 // before InitCollective
  EXPECT_EQ(core.InitCollective("job-2", nullptr, "h", absl::Seconds(1)).code(), kFP);
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).code(), kFP);
  EXPECT_EQ(RunFor(core, "job-1", 1, 1).code(), kFP);  // step 0 comes first
  ASSERT_TRUE(RunFor(core, "job-1", 0, 1).ok());
  EXPECT_EQ(RunFor(core, "job-1", 0, 1).code(), kFP);  // no repeats
  // Abort for another job is a no-op; for ours it frees the worker.
  ASSERT_TRUE(core.Abort("job-2", "").ok());
  EXPECT_EQ(core.Status().job_id(), "job-1");
  ASSERT_TRUE(core.Abort("job-1", "").ok());
  ASSERT_TRUE(core.Abort("job-1", "").ok());  // idempotent
  EXPECT_TRUE(core.SetupJob(SetupRequest("job-2")).ok());
}

TEST(WorkerCore, AbortFromEveryState) {
  for (int stop_after = 0; stop_after < 3; ++stop_after) {
    WorkerCore core(Factory());
    ASSERT_TRUE(core.Abort("", "nothing to abort").ok());
    ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
    if (stop_after >= 1) ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
    if (stop_after >= 2) ASSERT_TRUE(RunFor(core, "job-1", 0, 2).ok());
    ASSERT_TRUE(core.Abort("job-1", "stop").ok());
    EXPECT_EQ(core.Status().phase(), "idle");
    EXPECT_TRUE(core.Status().job_id().empty());
  }
}

TEST(WorkerCore, AbortMidRunReturnsPromptly) {
  FakeTrainerOptions slow;
  slow.step_time = absl::Milliseconds(200);
  WorkerCore core(Factory(slow));
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  absl::Status run_status;
  std::thread runner([&] { run_status = RunFor(core, "job-1", 0, 1000); });
  absl::SleepFor(absl::Milliseconds(300));
  absl::Time start = absl::Now();
  ASSERT_TRUE(core.Abort("job-1", "operator").ok());
  runner.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(run_status.code(), absl::StatusCode::kCancelled);
  EXPECT_NE(run_status.message().find("operator"), std::string::npos);
}

TEST(WorkerCore, InternalErrorsMarkTheWorkerUnhealthy) {
  FakeTrainerOptions faulty;
  faulty.fail_at_step = 1;
  faulty.fail_code = absl::StatusCode::kInternal;
  WorkerCore core(Factory(faulty));
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(RunFor(core, "job-1", 0, 3).code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(core.healthy());
  EXPECT_NE(core.health_reason().find("injected"), std::string::npos);
  ASSERT_TRUE(core.Abort("job-1", "").ok());
  EXPECT_EQ(core.SetupJob(SetupRequest("job-2")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(core.Status().phase(), "unhealthy");
}

TEST(WorkerCore, AbortedCollectiveDoesNotMarkUnhealthy) {
  FakeTrainerOptions peer_lost;
  peer_lost.fail_at_step = 0;
  peer_lost.fail_code = absl::StatusCode::kAborted;
  WorkerCore core(Factory(peer_lost));
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(RunFor(core, "job-1", 0, 1).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(core.healthy());
}

TEST(WorkerCore, BadSetupRequestsAreInvalidArgument) {
  WorkerCore core(Factory());
  v1::SetupJobRequest r = SetupRequest("job-1");
  r.set_rank(3);
  EXPECT_EQ(core.SetupJob(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = SetupRequest("");
  EXPECT_EQ(core.SetupJob(r).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

// The worker's command state machine with a fake trainer: the happy path,
// every out-of-order command, wrong job ids, abort from each state and
// mid-run, consecutive steps, health, the single compute thread, and specs
// or setups that would exhaust memory failing the job, never the worker.
#include "worker/daemon/worker_core.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/job_log.h"

namespace tessera {
namespace {

WorkerCore::TrainerFactory Factory(FakeTrainerOptions options = {}) {
  return [options](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer(options));
  };
}

// Trainer i gets options[i]; later ones get the last entry.
WorkerCore::TrainerFactory SequenceFactory(std::vector<FakeTrainerOptions> options) {
  auto made = std::make_shared<std::atomic<int>>(0);
  return [options, made](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    const int i = std::min<int>(made->fetch_add(1), static_cast<int>(options.size()) - 1);
    return std::unique_ptr<Trainer>(new FakeTrainer(options[i]));
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

// A step that changes how later steps run (the CUDA trainer capturing its
// step in a graph, or failing to) says so once in the job's log: INFO, or
// WARNING when the job will run slower than it could.
TEST(WorkerCore, EngineNotesOfAStepGoToTheJobLogOnce) {
  for (bool warning : {false, true}) {
    SCOPED_TRACE(warning);
    FakeTrainerOptions options;
    options.note_at_step = 1;
    options.note = "step captured in a CUDA graph";
    options.note_is_warning = warning;
    JobLog log(nullptr);
    WorkerCore core(Factory(options));
    core.set_job_log(&log);
    ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
    ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
    ASSERT_TRUE(RunFor(core, "job-1", 0, 3).ok());
    JobLog::Batch batch = log.Read("job-1", 0, 1000, absl::ZeroDuration());
    int notes = 0;
    for (const v1::LogLine& line : batch.lines) {
      if (line.message() != options.note) continue;
      ++notes;
      EXPECT_EQ(line.step(), 1);
      EXPECT_EQ(line.severity(), warning ? v1::WARNING : v1::INFO);
    }
    EXPECT_EQ(notes, 1);
    ASSERT_TRUE(core.Abort("job-1", "done").ok());
  }
}

// Once per job, after its first step, the log sets the memory the step
// holds against SetupJob's estimate; later chunks do not repeat it.
TEST(WorkerCore, TheJobLogComparesMeasuredMemoryWithTheEstimateOnce) {
  JobLog log(nullptr);
  WorkerCore core(Factory());
  core.set_job_log(&log);
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  ASSERT_TRUE(RunFor(core, "job-1", 0, 2).ok());
  ASSERT_TRUE(RunFor(core, "job-1", 2, 2).ok());
  JobLog::Batch batch = log.Read("job-1", 0, 1000, absl::ZeroDuration());
  int lines = 0;
  for (const v1::LogLine& line : batch.lines) {
    if (line.message().rfind("device memory in use after the step: 0.06 GiB; SetupJob's "
                             "estimate: ", 0) != 0) {
      continue;
    }
    ++lines;
    EXPECT_EQ(line.step(), 0);
    EXPECT_NE(line.message().find("% of it)"), std::string::npos) << line.message();
  }
  EXPECT_EQ(lines, 1);
  ASSERT_TRUE(core.Abort("job-1", "done").ok());
}

TEST(WorkerCore, HappyPathRunsOnOneComputeThread) {
  FakeTrainer::ResetCallingThreads();
  std::mt19937 rng(std::random_device{}());
  const int first_chunk = 1 + static_cast<int>(rng() % 5);
  const int second_chunk = 1 + static_cast<int>(rng() % 5);
  WorkerCore core(Factory());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  EXPECT_EQ(core.Status().phase(), "set_up");
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(core.Status().phase(), "collective_ready");
  std::vector<StepReport> reports;
  ASSERT_TRUE(RunFor(core, "job-1", 0, first_chunk, &reports).ok());
  ASSERT_TRUE(RunFor(core, "job-1", first_chunk, second_chunk, &reports).ok());
  const int total = first_chunk + second_chunk;
  ASSERT_EQ(reports.size(), static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) EXPECT_EQ(reports[i].step, i);
  for (int i = 1; i < total; ++i) EXPECT_LT(reports[i].loss, reports[i - 1].loss);
  EXPECT_EQ(reports[0].tokens, 16);
  ASSERT_TRUE(core.Checkpoint("job-1", total, "/tmp/x").ok());
  EXPECT_EQ(core.Status().phase(), "collective_ready");
  // What heartbeats report to the coordinator.
  EXPECT_EQ(core.Status().steps_done(), total);
  v1::WorkerActivity activity = core.Activity();
  EXPECT_EQ(activity.job_id(), "job-1");
  EXPECT_EQ(activity.phase(), "collective_ready");
  EXPECT_EQ(activity.steps_done(), total);
  ASSERT_TRUE(core.Abort("job-1", "done").ok());
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_EQ(core.Activity().job_id(), "");
  EXPECT_EQ(core.Activity().phase(), "idle");
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
    if (stop_after >= 1) {
      ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
    }
    if (stop_after >= 2) {
      ASSERT_TRUE(RunFor(core, "job-1", 0, 2).ok());
    }
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

TEST(WorkerCore, AbortDuringSetupCancelsItAndFreesTheWorker) {
  FakeTrainerOptions slow_setup;
  slow_setup.setup_time = absl::Seconds(10);
  WorkerCore core(SequenceFactory({slow_setup, FakeTrainerOptions{}}));
  absl::StatusOr<v1::SetupJobResponse> setup;
  std::thread setter([&] { setup = core.SetupJob(SetupRequest("job-1")); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(core.Status().phase(), "setting_up");
  EXPECT_EQ(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(core.Abort("job-1", "user").ok());
  setter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.healthy());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-2")).ok());
  EXPECT_TRUE(core.InitCollective("job-2", nullptr, "h", absl::Seconds(1)).ok());
}

TEST(WorkerCore, FailedSetupLeavesTheWorkerFreeEvenWhileAborted) {
  // The first setup fails on its own while an Abort is waiting on it; the
  // worker must come back fully usable, not stuck "being aborted".
  FakeTrainerOptions failing;
  failing.setup_time = absl::Milliseconds(300);
  failing.setup_fail_code = absl::StatusCode::kResourceExhausted;
  WorkerCore core(SequenceFactory({failing, failing, FakeTrainerOptions{}}));
  EXPECT_EQ(core.SetupJob(SetupRequest("job-1")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.healthy());  // out of memory is the job's problem, not the device's

  absl::StatusOr<v1::SetupJobResponse> setup;
  std::thread setter([&] { setup = core.SetupJob(SetupRequest("job-2")); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(core.Abort("job-2", "").ok());
  setter.join();
  EXPECT_FALSE(setup.ok());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-3")).ok());
  ASSERT_TRUE(core.InitCollective("job-3", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_TRUE(RunFor(core, "job-3", 0, 2).ok());
}

TEST(WorkerCore, FactoryFailureIsReturnedAndTheWorkerStaysIdle) {
  WorkerCore core([](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return absl::UnavailableError("device: cuda:7 is not present");
  });
  EXPECT_EQ(core.SetupJob(SetupRequest("job-1")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.Status().job_id().empty());
}

TEST(WorkerCore, ConcurrentAbortsAllReturnOnceTheJobIsGone) {
  FakeTrainerOptions slow;
  slow.step_time = absl::Milliseconds(100);
  WorkerCore core(Factory(slow));
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  absl::Status run_status;
  std::thread runner([&] { run_status = RunFor(core, "job-1", 0, 1000); });
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_EQ(core.Status().phase(), "running");
  // Not mid-step: a checkpoint waits for the run to end.
  EXPECT_EQ(core.Checkpoint("job-1", 1, "/tmp").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<std::thread> aborters;
  std::atomic<int> failures{0};
  for (int i = 0; i < 3; ++i) {
    aborters.emplace_back([&, i] {
      if (!core.Abort(i == 0 ? "" : "job-1", "stop").ok()) failures++;
      if (!core.Status().job_id().empty()) failures++;
    });
  }
  for (auto& t : aborters) t.join();
  runner.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(run_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.SetupJob(SetupRequest("job-2")).ok());
}

TEST(WorkerCore, CheckpointFromSetUpAndOnlyOfTheCurrentStep) {
  WorkerCore core(Factory());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  absl::StatusOr<CheckpointStarted> started = core.Checkpoint("job-1", 0, "/tmp/ck");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->manifest_path, "/tmp/ck/step-0/rank-0.bin");
  EXPECT_EQ(core.Status().phase(), "set_up");
  absl::StatusOr<CheckpointWritten> written = core.AwaitCheckpoint("job-1", 0);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->manifest_path, "/tmp/ck/step-0/rank-0.bin");
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  ASSERT_TRUE(RunFor(core, "job-1", 0, 3).ok());
  EXPECT_EQ(core.Checkpoint("job-1", 2, "/tmp/ck").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core.Checkpoint("job-1", 3, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core.Checkpoint("job-2", 3, "/tmp/ck").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(core.Checkpoint("job-1", 3, "/tmp/ck").ok());
  // Awaiting: only the current job, and only a step that was started.
  EXPECT_TRUE(core.AwaitCheckpoint("job-1", 3).ok());
  EXPECT_EQ(core.AwaitCheckpoint("job-1", 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core.AwaitCheckpoint("job-2", 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // It may run while steps run: the write is awaited beside the next steps.
  absl::StatusOr<CheckpointWritten> beside_steps;
  std::thread awaiter([&] { beside_steps = core.AwaitCheckpoint("job-1", 3); });
  ASSERT_TRUE(RunFor(core, "job-1", 3, 2).ok());
  awaiter.join();
  EXPECT_TRUE(beside_steps.ok()) << beside_steps.status();
  ASSERT_TRUE(core.Abort("job-1", "done").ok());
  EXPECT_EQ(core.AwaitCheckpoint("job-1", 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerCore, ResumeRestoresAfterSetupAndStartsAtTheResumedStep) {
  WorkerCore core(Factory());
  v1::SetupJobRequest request = SetupRequest("job-1");
  request.mutable_spec()->set_steps(10);
  request.mutable_spec()->mutable_checkpoint()->set_dir("/shared/ckpt");
  request.set_resume_step(4);
  ASSERT_TRUE(core.SetupJob(request).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(RunFor(core, "job-1", 0, 1).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<StepReport> steps;
  ASSERT_TRUE(RunFor(core, "job-1", 4, 2, &steps).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 4);
  EXPECT_TRUE(core.Checkpoint("job-1", 6, "/tmp/ck").ok());
}

// A checkpoint written under another numerics stack resumes, with a
// WARNING in the job's log before the first step.
TEST(WorkerCore, ARestoreWarningGoesToTheJobLogAsAWarning) {
  FakeTrainerOptions options;
  options.restore_warning = "resumed from step 4 on another numerics stack";
  JobLog log(nullptr);
  WorkerCore core(Factory(options));
  core.set_job_log(&log);
  v1::SetupJobRequest request = SetupRequest("job-1");
  request.mutable_spec()->set_steps(10);
  request.mutable_spec()->mutable_checkpoint()->set_dir("/shared/ckpt");
  request.set_resume_step(4);
  ASSERT_TRUE(core.SetupJob(request).ok());
  JobLog::Batch batch = log.Read("job-1", 0, 1000, absl::ZeroDuration());
  int warnings = 0;
  for (const v1::LogLine& line : batch.lines) {
    if (line.message() != options.restore_warning) continue;
    ++warnings;
    EXPECT_EQ(line.severity(), v1::WARNING);
  }
  EXPECT_EQ(warnings, 1);
  // A fresh start restores nothing and warns of nothing.
  JobLog fresh_log(nullptr);
  WorkerCore fresh(Factory(options));
  fresh.set_job_log(&fresh_log);
  ASSERT_TRUE(fresh.SetupJob(SetupRequest("job-2")).ok());
  for (const v1::LogLine& line : fresh_log.Read("job-2", 0, 1000, absl::ZeroDuration()).lines) {
    EXPECT_NE(line.message(), options.restore_warning);
  }
}

TEST(WorkerCore, BadResumeRequestsAreInvalidArgument) {
  WorkerCore core(Factory());
  v1::SetupJobRequest request = SetupRequest("job-1");
  request.mutable_spec()->set_steps(10);
  request.set_resume_step(4);  // but no checkpoint.dir
  absl::Status s = core.SetupJob(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("checkpoint.dir"), absl::string_view::npos) << s;
  request.mutable_spec()->mutable_checkpoint()->set_dir("/shared/ckpt");
  for (int bad : {-1, 10, 11}) {
    request.set_resume_step(bad);
    s = core.SetupJob(request).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("resume_step"), absl::string_view::npos) << s;
  }
  EXPECT_EQ(core.Status().phase(), "idle");
}

TEST(WorkerCore, ADamagedCheckpointFailsSetupButNotTheWorker) {
  FakeTrainerOptions damaged;
  damaged.restore_fail_code = absl::StatusCode::kDataLoss;
  WorkerCore core(SequenceFactory({damaged, {}}));
  v1::SetupJobRequest request = SetupRequest("job-1");
  request.mutable_spec()->set_steps(10);
  request.mutable_spec()->mutable_checkpoint()->set_dir("/shared/ckpt");
  request.set_resume_step(4);
  EXPECT_EQ(core.SetupJob(request).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(core.Status().healthy());
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.SetupJob(request).ok());  // the next job gets the worker
}

TEST(WorkerCore, OutOfOrderMessageNamesTheCommandAndTheFix) {
  WorkerCore core(Factory());
  absl::Status s = core.InitCollective("job-3", nullptr, "h", absl::Seconds(1));
  EXPECT_EQ(s.message(), "InitCollective for job-3: worker is idle; SetupJob first");
}

TEST(WorkerCore, BadSetupRequestsAreInvalidArgument) {
  WorkerCore core(Factory());
  v1::SetupJobRequest r = SetupRequest("job-1");
  r.set_rank(3);
  EXPECT_EQ(core.SetupJob(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = SetupRequest("");
  EXPECT_EQ(core.SetupJob(r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core.Status().phase(), "idle");
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-1")).ok());
  ASSERT_TRUE(core.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_EQ(RunFor(core, "job-1", 0, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkerCore, SpecBeyondTheLimitsIsRefusedBeforeTheTrainerExists) {
  std::atomic<int> trainers{0};
  WorkerCore core([&trainers](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    ++trainers;
    return std::unique_ptr<Trainer>(new FakeTrainer());
  });
  v1::SetupJobRequest request = SetupRequest("job-1");
  request.mutable_spec()->mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000);
  absl::StatusOr<v1::SetupJobResponse> setup = core.SetupJob(request);
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(setup.status().message().rfind("spec.data.synthetic.num_tokens: must be <= ", 0), 0u)
      << setup.status();
  request.mutable_spec()->mutable_data()->mutable_synthetic()->set_num_tokens(0);
  request.mutable_spec()->set_steps(2147483647);
  EXPECT_EQ(core.SetupJob(request).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainers.load(), 0);
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.healthy());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-2")).ok());
}

TEST(WorkerCore, SetupOutOfHostMemoryFailsTheJobNotTheWorker) {
  FakeTrainerOptions throws;
  throws.setup_throws_bad_alloc = true;
  WorkerCore core(SequenceFactory({throws, FakeTrainerOptions{}}));
  absl::StatusOr<v1::SetupJobResponse> setup = core.SetupJob(SetupRequest("job-1"));
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(setup.status().message().find("out of host memory"), absl::string_view::npos)
      << setup.status();
  EXPECT_EQ(core.Status().phase(), "idle");
  EXPECT_TRUE(core.healthy());
  ASSERT_TRUE(core.SetupJob(SetupRequest("job-2")).ok());
  ASSERT_TRUE(core.InitCollective("job-2", nullptr, "h", absl::Seconds(1)).ok());
  EXPECT_TRUE(RunFor(core, "job-2", 0, 2).ok());
}

}  // namespace
}  // namespace tessera

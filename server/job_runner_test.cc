// JobRunner with in-memory workers: success with aggregation and
// checkpoints (committed once every rank wrote them, pruned to keep_last, a
// failed one committing nothing), resume from the latest committed step and
// from one never committed (NOT_FOUND), a failing rank,  a failing setup, cancel mid-run, a stuck
// worker that must not hang the job, the step watchdog (a rank that stops
// reporting fails the job, slow steps that progress do not), a rank's
// duplicated results, a job of 2^31-1 steps, whose bookkeeping must not
// be sized by its step count, and what an attempt's outcome tells the
// restart logic (the cause, which workers acknowledged the Abort or were
// unreachable, the committed step, the attempt number on every record), and
// checkpoint now and suspend: a chunk ended early at a step every rank
// stops at, committed, then continued or ended SUSPENDED. Also what a
// checkpoint that had to wait says, and a prune that fails after a commit.
#include "server/job_runner.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_layout.h"
#include "common/checkpoint_size.h"
#include "server/checkpoint_space.h"
#include "gtest/gtest.h"
#include "server/fake_worker_connection.h"

namespace tessera {
namespace {

struct Harness {
  std::vector<FakeWorkerConnection*> workers;
  std::vector<v1::StepMetrics> metrics;
  std::vector<v1::JobState> states;
  std::vector<v1::WorkerError> errors;
  absl::Mutex mu;
  std::unique_ptr<JobRunner> runner;

  std::vector<std::string> reasons;
  std::vector<int> commits;
  std::vector<v1::CheckpointCommitted> commit_records;
  // "step N" and "commit N", in the order the callbacks ran.
  std::vector<std::string> events;
  std::function<void(const v1::StepMetrics&)> after_step;  // runs after each step's record
  std::vector<v1::CheckpointSkipped> skipped;
  std::vector<v1::Fp8Numerics> numerics;
  // Free bytes under the checkpoint directory; unset: the real disk's.
  std::function<absl::StatusOr<int64_t>(const std::string&)> free_bytes;

  Harness(v1::JobSpec spec, std::vector<FakeWorkerBehavior> behaviors, JobAttempt attempt = {}) {
    std::vector<std::unique_ptr<WorkerConnection>> connections;
    std::vector<std::string> ids;
    for (size_t r = 0; r < behaviors.size(); ++r) {
      auto c = std::make_unique<FakeWorkerConnection>(static_cast<int>(r), behaviors[r]);
      workers.push_back(c.get());
      connections.push_back(std::move(c));
      ids.push_back("w-" + std::to_string(r + 1));
    }
    JobRunnerCallbacks cb;
    cb.on_state = [this](v1::JobState s, const std::string& reason) {
      absl::MutexLock l(&mu);
      states.push_back(s);
      reasons.push_back(reason);
    };
    cb.on_step = [this](const v1::StepMetrics& m) {
      {
        absl::MutexLock l(&mu);
        metrics.push_back(m);
        events.push_back(absl::StrCat("step ", m.step()));
      }
      if (after_step) after_step(m);
    };
    cb.on_commit = [this](const v1::CheckpointCommitted& commit) {
      absl::MutexLock l(&mu);
      commits.push_back(commit.step());
      commit_records.push_back(commit);
      events.push_back(absl::StrCat("commit ", commit.step()));
    };
    cb.on_worker_error = [this](const v1::WorkerError& e) {
      absl::MutexLock l(&mu);
      errors.push_back(e);
    };
    cb.on_checkpoint_skipped = [this](const v1::CheckpointSkipped& e) {
      absl::MutexLock l(&mu);
      skipped.push_back(e);
    };
    cb.on_numerics = [this](const v1::Fp8Numerics& n) {
      absl::MutexLock l(&mu);
      numerics.push_back(n);
      events.push_back(absl::StrCat("numerics ", n.step()));
    };
    cb.checkpoint_free_bytes = [this](const std::string& path) -> absl::StatusOr<int64_t> {
      if (free_bytes) return free_bytes(path);
      return FreeBytesUnder(path);
    };
    spec.set_world_size(static_cast<int>(behaviors.size()));
    runner = std::make_unique<JobRunner>("job-1", spec, ids, std::move(connections), "coord:1",
                                         absl::Seconds(5), cb, attempt);
  }
};

// A worker's commands without its AwaitCheckpoint calls, which run on the
// committer's thread beside the steps, so their place in the list varies.
std::vector<std::string> MainCommands(FakeWorkerConnection* worker) {
  std::vector<std::string> out;
  for (const std::string& c : worker->commands()) {
    if (c.rfind("AwaitCheckpoint@", 0) != 0) out.push_back(c);
  }
  return out;
}

v1::JobSpec Spec(int steps) {
  v1::JobSpec s;
  s.set_steps(steps);
  return s;
}

std::string FreshRoot(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// A job of `steps` steps checkpointing every `interval` under `root`.
v1::JobSpec CheckpointingSpec(int steps, int interval, const std::string& root) {
  v1::JobSpec spec = Spec(steps);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_interval_steps(interval);
  return spec;
}

TEST(JobRunner, RunsToSuccessAggregatingOneRecordPerStep) {
  v1::JobSpec spec = Spec(10);
  spec.mutable_checkpoint()->set_dir(FreshRoot("success"));
  spec.mutable_checkpoint()->set_interval_steps(4);
  Harness h(spec, {{}, {}});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  ASSERT_EQ(h.metrics.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(h.metrics[i].step(), i);
    EXPECT_EQ(h.metrics[i].tokens(), 200);  // summed over ranks
    EXPECT_NEAR(h.metrics[i].step_time_s(), 0.002, 1e-9);  // slowest rank
    // ... and that rank's phases, whichever rank reported first.
    EXPECT_EQ(h.metrics[i].phases().forward_s(), 1.0);
    EXPECT_NEAR(h.metrics[i].phases().backward_s(), 0.002, 1e-9);
    EXPECT_NEAR(h.metrics[i].tokens_per_s(), 200 / 0.002, 1e-3);
    EXPECT_GE(h.metrics[i].control_overhead_s(), 0.0);
    EXPECT_FLOAT_EQ(h.metrics[i].loss(), 3.0f - 0.01f * i);
    // The fullest rank's memory, and which rank it is.
    EXPECT_EQ(h.metrics[i].peak_memory_bytes(), 2 * FakeWorkerConnection::kPeakMemoryBytes);
    EXPECT_EQ(h.metrics[i].peak_memory_rank(), 1);
  }
  EXPECT_EQ(h.states, (std::vector<v1::JobState>{v1::STARTING, v1::RUNNING}));
  std::vector<std::string> c = MainCommands(h.workers[0]);
  // Chunks end at checkpoint boundaries 4, 8, then the end (10).
  EXPECT_EQ(c, (std::vector<std::string>{"SetupJob", "InitCollective", "RunSteps", "Checkpoint@4",
                                         "RunSteps", "Checkpoint@8", "RunSteps", "Checkpoint@10",
                                         "Abort"}));
}

// FP8 statistics steps: the ranks' parts add up into one record per
// interval, reported after the step's own record.
TEST(JobRunner, AddsUpTheRanksFp8StatisticsOncePerInterval) {
  v1::JobSpec spec = Spec(5);
  spec.mutable_fp8()->set_stats_interval_steps(2);
  Harness h(spec, {{}, {}});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  ASSERT_EQ(h.numerics.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const v1::Fp8Numerics& n = h.numerics[i];
    EXPECT_EQ(n.step(), 2 * i);
    ASSERT_EQ(n.tensors_size(), 1);
    EXPECT_EQ(n.tensors(0).saturated(), 3);      // 1 + 2
    EXPECT_EQ(n.tensors(0).underflowed(), 10);   // 0 + 10
    EXPECT_EQ(n.tensors(0).elements(), 2000);
    EXPECT_EQ(n.tensors(0).amax(), 2.0f);        // the largest
    EXPECT_DOUBLE_EQ(n.tensors(0).saturated_fraction(), 0.0015);
    EXPECT_DOUBLE_EQ(n.tensors(0).underflow_fraction(), 0.005);
  }
  const auto at = [&](const std::string& e) {
    return std::find(h.events.begin(), h.events.end(), e) - h.events.begin();
  };
  EXPECT_EQ(at("numerics 2"), at("step 2") + 1);
}

TEST(JobRunner, CommitsEachCheckpointOnceAllRanksWroteItAndKeepsTheLast) {
  const std::string root = FreshRoot("commit");
  v1::JobSpec spec = CheckpointingSpec(10, 4, root);
  spec.mutable_checkpoint()->set_keep_last(2);
  Harness h(spec, {{}, {}});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{8, 10}));  // step 4 pruned
  EXPECT_EQ(ReadCommitMarker(root, 10)->world_size, 2);
  EXPECT_EQ(h.workers[0]->resume_step(), 0);
}

TEST(JobRunner, AFailedCheckpointFailsTheJobAndCommitsNothing) {
  const std::string root = FreshRoot("failed-checkpoint");
  FakeWorkerBehavior full_disk;
  full_disk.fail_checkpoint_at = 8;
  Harness h(CheckpointingSpec(10, 4, root), {{}, full_disk});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.reason.find("Checkpoint failed on worker w-2"), std::string::npos)
      << outcome.reason;
  EXPECT_NE(outcome.reason.find("RESOURCE_EXHAUSTED"), std::string::npos) << outcome.reason;
  // Step 4 was committed; step 8's partial directory (rank 0's files) is gone.
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{4}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{4}));
}

TEST(JobRunner, TrainingGoesOnWhileTheCheckpointIsWritten) {
  const std::string root = FreshRoot("async-checkpoint");
  // The writes of step 4 finish only once step 7 has been reported: a
  // runner that waited for the write before the next steps would never
  // see step 7 (the gate then fails the write after 30 s, and the test).
  auto gate = std::make_shared<absl::Notification>();
  FakeWorkerBehavior held;
  held.checkpoint_write_gate = gate;
  Harness h(CheckpointingSpec(8, 4, root), {held, held});
  h.after_step = [&](const v1::StepMetrics& m) {
    if (m.step() == 7) gate->Notify();
  };
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(outcome.committed_step, 8);
  const auto step7 = std::find(h.events.begin(), h.events.end(), "step 7");
  const auto commit4 = std::find(h.events.begin(), h.events.end(), "commit 4");
  ASSERT_NE(step7, h.events.end());
  ASSERT_NE(commit4, h.events.end());
  EXPECT_LT(step7, commit4);
  // The final checkpoint is committed before the job ends.
  EXPECT_EQ(h.events.back(), "commit 8");
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{4, 8}));
}

TEST(JobRunner, ACommitRecordsEveryRanksBytesTimesAndTheStall) {
  const std::string root = FreshRoot("commit-record");
  FakeWorkerBehavior slow_write;
  slow_write.checkpoint_write_time = absl::Milliseconds(20);
  Harness h(CheckpointingSpec(6, 3, root), {slow_write, slow_write});
  ASSERT_EQ(h.runner->Run().state, v1::SUCCEEDED);
  ASSERT_EQ(h.commit_records.size(), 2u);
  const v1::CheckpointCommitted& c = h.commit_records[0];
  EXPECT_EQ(c.step(), 3);
  EXPECT_EQ(c.bytes(), 2 * FakeWorkerConnection::kCheckpointBytes);
  ASSERT_EQ(c.ranks_size(), 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c.ranks(r).rank(), r);
    EXPECT_EQ(c.ranks(r).bytes(), FakeWorkerConnection::kCheckpointBytes);
    EXPECT_DOUBLE_EQ(c.ranks(r).snapshot_s(), 0.001);
    EXPECT_DOUBLE_EQ(c.ranks(r).write_s(), 0.02);
    EXPECT_NEAR(c.ranks(r).write_gb_per_s(), 1000 / 0.02 / 1e9, 1e-12);
    EXPECT_TRUE(c.ranks(r).background());
  }
  EXPECT_DOUBLE_EQ(c.stall_s(), 0.001);
  EXPECT_GE(c.write_s(), 0.02);
  // The first step after the checkpoint carries what training waited for.
  ASSERT_EQ(h.metrics.size(), 6u);
  EXPECT_DOUBLE_EQ(h.metrics[3].phases().checkpoint_snapshot_s(), 0.001);
  EXPECT_DOUBLE_EQ(h.metrics[3].phases().checkpoint_wait_s(), 0.0);
  EXPECT_DOUBLE_EQ(h.metrics[4].phases().checkpoint_snapshot_s(), 0.0);
}

// A regular checkpoint that waits blames the interval; the final one, close
// after the previous, says how close instead.
TEST(JobRunner, AWaitingCheckpointSaysWhyItWaited) {
  const std::string root = FreshRoot("waiting-checkpoint");
  FakeWorkerBehavior slow_write;
  slow_write.checkpoint_write_time = absl::Milliseconds(1500);
  Harness h(CheckpointingSpec(7, 3, root), {slow_write, slow_write});
  ASSERT_EQ(h.runner->Run().state, v1::SUCCEEDED);
  ASSERT_EQ(h.commit_records.size(), 3u);
  EXPECT_EQ(h.commit_records[0].warning(), "");
  EXPECT_NE(h.commit_records[1].warning().find("checkpoint.interval_steps (3) is shorter"),
            std::string::npos)
      << h.commit_records[1].warning();
  const std::string& last = h.commit_records[2].warning();
  EXPECT_NE(last.find("came 1 step after the previous one (step 6)"), std::string::npos) << last;
  EXPECT_NE(last.find("training had ended"), std::string::npos) << last;
  EXPECT_EQ(last.find("interval_steps"), std::string::npos) << last;
}

// Removing an old step that cannot be removed used to discard the step just
// committed and fail the job; the commit now stands and the record says why
// the old step is still there.
TEST(JobRunner, APruneThatFailsKeepsTheCommitAndSaysSo) {
  const std::string root = FreshRoot("prune-fails");
  ASSERT_TRUE(CreateCheckpointRoot(root).ok());
  ASSERT_TRUE(CreateStepDir(root, 2).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {2, 2}).ok());
  ASSERT_EQ(::mkdir((StepDir(root, 2) + "/not-a-file").c_str(), 0755), 0);
  v1::JobSpec spec = CheckpointingSpec(8, 4, root);
  spec.mutable_checkpoint()->set_keep_last(1);
  Harness h(spec, {{}, {}});
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.commits, (std::vector<int>{4, 8}));
  EXPECT_EQ(ListCommittedSteps(root)->back(), 8);
  const std::string& warning = h.commit_records[0].warning();
  EXPECT_NE(warning.find("they stay on disk; the commit of step 4 stands"), std::string::npos)
      << warning;
  EXPECT_GE(h.commit_records[0].prune_s(), 0.0);
}

TEST(JobRunner, AFailedBackgroundWriteFailsTheJobAndCommitsNothing) {
  const std::string root = FreshRoot("failed-write");
  FakeWorkerBehavior broken_disk;
  broken_disk.fail_checkpoint_write_at = 8;
  broken_disk.checkpoint_write_fail_code = absl::StatusCode::kInternal;
  Harness h(CheckpointingSpec(12, 4, root), {{}, broken_disk});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_EQ(outcome.cause, absl::StatusCode::kInternal);
  EXPECT_NE(outcome.reason.find("AwaitCheckpoint failed on worker w-2"), std::string::npos)
      << outcome.reason;
  EXPECT_EQ(outcome.committed_step, 4);
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{4}));
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{4}));
}

TEST(JobRunner, ADiskThatFillsDuringAWriteSkipsThatCheckpointAndTrainsOn) {
  const std::string root = FreshRoot("full-during-write");
  FakeWorkerBehavior full_disk;
  full_disk.fail_checkpoint_write_at = 8;  // RESOURCE_EXHAUSTED
  Harness h(CheckpointingSpec(12, 4, root), {{}, full_disk});
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.commits, (std::vector<int>{4, 12}));
  ASSERT_EQ(h.skipped.size(), 1u);
  EXPECT_EQ(h.skipped[0].step(), 8);
  EXPECT_NE(h.skipped[0].reason().find("rank 1 (w-2)"), std::string::npos)
      << h.skipped[0].reason();
  EXPECT_NE(h.skipped[0].reason().find("No space left on device"), std::string::npos);
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{4, 12}));  // step 8's files are gone
  EXPECT_EQ(h.metrics.size(), 12u);
}

TEST(JobRunner, ACheckpointThatDoesNotFitIsSkippedAndTrainingGoesOn) {
  const std::string root = FreshRoot("does-not-fit");
  v1::JobSpec spec = CheckpointingSpec(12, 4, root);
  spec.set_world_size(2);  // as the runner sees it: its size estimate counts both ranks
  Harness h(spec, {{}, {}});
  int probes = 0;
  h.free_bytes = [&](const std::string&) -> absl::StatusOr<int64_t> {
    return ++probes == 2 ? 0 : (int64_t{1} << 40);  // full only at step 8
  };
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.commits, (std::vector<int>{4, 12}));
  ASSERT_EQ(h.skipped.size(), 1u);
  EXPECT_EQ(h.skipped[0].step(), 8);
  EXPECT_EQ(h.skipped[0].bytes_needed(), EstimateCheckpointSize(spec).total_bytes);
  EXPECT_EQ(h.skipped[0].bytes_available(), 0);
  // The ranks were never asked to write step 8.
  for (const std::string& c : h.workers[0]->commands()) EXPECT_NE(c, "Checkpoint@8");
}

TEST(JobRunner, AFinalCheckpointThatDoesNotFitFailsTheJobNamingTheBytes) {
  const std::string root = FreshRoot("final-does-not-fit");
  v1::JobSpec spec = CheckpointingSpec(8, 4, root);
  spec.set_world_size(2);
  Harness h(spec, {{}, {}});
  h.free_bytes = [](const std::string&) -> absl::StatusOr<int64_t> { return 10; };
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_EQ(outcome.cause, absl::StatusCode::kResourceExhausted);
  const int64_t needed = EstimateCheckpointSize(spec).total_bytes;
  EXPECT_NE(outcome.reason.find(absl::StrCat("needs ", needed, " bytes")), std::string::npos)
      << outcome.reason;
  EXPECT_NE(outcome.reason.find("only 10 bytes"), std::string::npos) << outcome.reason;
  EXPECT_NE(outcome.reason.find("final checkpoint"), std::string::npos) << outcome.reason;
  EXPECT_EQ(h.metrics.size(), 8u);  // training ran to the end
  EXPECT_EQ(h.skipped.size(), 1u);  // step 4
}

TEST(JobRunner, StepsKeepLastWouldPruneMakeRoomBeforeACheckpointIsSkipped) {
  const std::string root = FreshRoot("prune-first");
  v1::JobSpec spec = CheckpointingSpec(12, 4, root);
  spec.mutable_checkpoint()->set_keep_last(1);
  spec.set_world_size(2);
  const int64_t needed = EstimateCheckpointSize(spec).total_bytes;
  Harness h(spec, {{}, {}});
  // Room for one checkpoint and a half: each commit's predecessor must go
  // before the next fits.
  h.free_bytes = [&](const std::string&) -> absl::StatusOr<int64_t> {
    absl::StatusOr<std::vector<int64_t>> held = ListStepDirs(root);
    if (!held.ok()) return held.status();
    return needed * 3 / 2 - needed * static_cast<int64_t>(held->size());
  };
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.commits, (std::vector<int>{4, 8, 12}));
  EXPECT_TRUE(h.skipped.empty());
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{12}));
}

TEST(JobRunner, AFailedFinalWriteFailsTheJobInsteadOfSucceeding) {
  const std::string root = FreshRoot("failed-final-write");
  FakeWorkerBehavior full_disk;
  full_disk.fail_checkpoint_write_at = 6;
  Harness h(CheckpointingSpec(6, 3, root), {full_disk, {}});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED) << outcome.reason;
  EXPECT_EQ(outcome.cause, absl::StatusCode::kResourceExhausted);
  EXPECT_NE(outcome.reason.find("AwaitCheckpoint failed on worker w-1"), std::string::npos)
      << outcome.reason;
  EXPECT_EQ(outcome.committed_step, 3);
  EXPECT_EQ(h.metrics.size(), 6u);  // every step ran; the last checkpoint did not land
}

TEST(JobRunner, ResumesFromTheLatestCommittedStep) {
  const std::string root = FreshRoot("resume");
  for (int step : {4, 8, 9}) {
    ASSERT_TRUE(CreateStepDir(root, step).ok());
    if (step != 9) {  // 9 was never committed
      ASSERT_TRUE(WriteCommitMarker(root, {step, 2}).ok());
    }
  }
  v1::JobSpec spec = CheckpointingSpec(12, 4, root);
  spec.mutable_checkpoint()->set_resume_from("latest");
  Harness h(spec, {{}, {}});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.workers[0]->resume_step(), 8);
  EXPECT_EQ(h.workers[1]->resume_step(), 8);
  ASSERT_EQ(h.metrics.size(), 4u);  // steps 8..11 only
  EXPECT_EQ(h.metrics.front().step(), 8);
  EXPECT_EQ(h.metrics.back().step(), 11);
  EXPECT_EQ(h.workers[0]->commands(),
            (std::vector<std::string>{"SetupJob", "InitCollective", "RunSteps", "Checkpoint@12",
                                      "AwaitCheckpoint@12", "Abort"}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{4, 8, 12}));
}

TEST(JobRunner, ResumingFromAStepThatWasNeverCommittedIsNotFound) {
  const std::string root = FreshRoot("resume-missing");
  for (const char* from : {"latest", "5"}) {
    v1::JobSpec spec = CheckpointingSpec(12, 4, root);
    spec.mutable_checkpoint()->set_resume_from(from);
    Harness h(spec, {{}, {}});
    JobOutcome outcome = h.runner->Run();
    EXPECT_EQ(outcome.state, v1::FAILED);
    EXPECT_NE(outcome.reason.find("checkpoint.resume_from: NOT_FOUND"), std::string::npos)
        << outcome.reason;
    EXPECT_EQ(h.workers[0]->commands(), std::vector<std::string>{"Abort"});  // no SetupJob
  }
}

TEST(JobRunner, FailingRankFailsTheJobAndAbortsTheOthers) {
  FakeWorkerBehavior bad;
  bad.fail_at_step = 3;
  FakeWorkerBehavior slow;
  slow.hang_in_run = true;  // would never finish on its own
  Harness h(Spec(100), {slow, bad});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.reason.find("w-2 (rank 1)"), std::string::npos) << outcome.reason;
  EXPECT_NE(outcome.reason.find("ABORTED"), std::string::npos) << outcome.reason;
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_EQ(h.errors[0].rank(), 1);
  EXPECT_EQ(h.workers[0]->commands().back(), "Abort");
}

TEST(JobRunner, SetupFailureIsReported) {
  FakeWorkerBehavior oom;
  oom.fail_setup = true;
  Harness h(Spec(5), {{}, oom});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.reason.find("SetupJob"), std::string::npos);
  EXPECT_NE(outcome.reason.find("RESOURCE_EXHAUSTED"), std::string::npos);
  EXPECT_TRUE(h.metrics.empty());
}

TEST(JobRunner, StopEndsAStuckJobPromptly) {
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;
  Harness h(Spec(100), {stuck, stuck});
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    h.runner->Stop(v1::CANCELLED, "cancelled by user");
  });
  absl::Time start = absl::Now();
  JobOutcome outcome = h.runner->Run();
  stopper.join();
  EXPECT_EQ(outcome.state, v1::CANCELLED);
  EXPECT_EQ(outcome.reason, "cancelled by user");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(h.errors.empty());  // a requested stop is not a worker error
}

TEST(JobRunner, StepWatchdogFailsAJobWhoseRankStopsReporting) {
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;  // heartbeats would still arrive: only the watchdog sees it
  v1::JobSpec spec = Spec(100);
  spec.set_step_timeout_s(1);
  Harness h(spec, {{}, stuck});
  const absl::Time start = absl::Now();
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.reason.find("step watchdog"), std::string::npos) << outcome.reason;
  EXPECT_NE(outcome.reason.find("step 0 is waiting on rank 1 (w-2)"), std::string::npos)
      << outcome.reason;
  EXPECT_EQ(outcome.reason.find("rank 0"), std::string::npos) << outcome.reason;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_TRUE(h.metrics.empty());
  EXPECT_TRUE(h.errors.empty());  // the cancelled RunSteps calls are not worker errors
  EXPECT_EQ(h.workers[1]->commands().back(), "Abort");
}

TEST(JobRunner, StepWatchdogLetsSlowStepsThatProgressFinish) {
  // 2.4 s of steps against a 2 s watchdog: only steps that reset it let the
  // job finish, and each step (0.2 s) has ten times its length to spare.
  FakeWorkerBehavior slow;
  slow.step_time = absl::Milliseconds(200);
  v1::JobSpec spec = Spec(12);
  spec.set_step_timeout_s(2);
  Harness h(spec, {slow, slow});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.metrics.size(), 12u);
}

TEST(JobRunner, ARanksRepeatedResultDoesNotCompleteAStep) {
  // Once a rank's duplicate counted as another rank's report, so a step was
  // published before every rank had finished it.
  FakeWorkerBehavior twice;
  twice.duplicate_results = true;
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;
  v1::JobSpec spec = Spec(3);
  spec.set_step_timeout_s(1);
  Harness h(spec, {twice, stuck});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_TRUE(h.metrics.empty());
  // With both ranks reporting, each step is published once.
  Harness both(Spec(3), {twice, {}});
  EXPECT_EQ(both.runner->Run().state, v1::SUCCEEDED);
  EXPECT_EQ(both.metrics.size(), 3u);
}

TEST(JobRunner, BookkeepingDoesNotGrowWithTheStepCount) {
  // Per-step state sized by spec.steps once made this constructor abort.
  Harness h(Spec(std::numeric_limits<int32_t>::max()), {{}, {}});
  JobOutcome outcome;
  std::thread run([&] { outcome = h.runner->Run(); });
  {
    absl::MutexLock lock(&h.mu);
    auto five_steps = [&h]() ABSL_SHARED_LOCKS_REQUIRED(h.mu) { return h.metrics.size() >= 5; };
    EXPECT_TRUE(h.mu.AwaitWithTimeout(absl::Condition(&five_steps), absl::Seconds(30)));
  }
  h.runner->Stop(v1::CANCELLED, "enough");
  run.join();
  EXPECT_EQ(outcome.state, v1::CANCELLED);
  absl::MutexLock lock(&h.mu);
  ASSERT_GE(h.metrics.size(), 5u);
  for (size_t i = 0; i < h.metrics.size(); ++i) {
    EXPECT_EQ(h.metrics[i].step(), static_cast<int>(i));
    EXPECT_EQ(h.metrics[i].tokens(), 200);
  }
}

TEST(JobRunner, AFailedAttemptNamesItsCauseAndWhoAcknowledgedTheAbort) {
  FakeWorkerBehavior bad;
  bad.fail_at_step = 3;  // ABORTED, as a collective whose peer died
  FakeWorkerBehavior gone;
  gone.hang_in_run = true;
  gone.abort_code = absl::StatusCode::kUnavailable;  // connection refused
  Harness h(Spec(100), {bad, gone});
  JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_EQ(outcome.cause, absl::StatusCode::kAborted);
  EXPECT_EQ(outcome.idle_workers, std::vector<std::string>{"w-1"});
  EXPECT_EQ(outcome.unreachable_workers, std::vector<std::string>{"w-2"});
  EXPECT_EQ(outcome.committed_step, 0);
}

TEST(JobRunner, TheStepWatchdogIsADeadlineAndAStopHasTheCauseItWasGiven) {
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;
  v1::JobSpec spec = Spec(100);
  spec.set_step_timeout_s(1);
  Harness watchdog(spec, {stuck});
  EXPECT_EQ(watchdog.runner->Run().cause, absl::StatusCode::kDeadlineExceeded);

  Harness lost(Spec(100), {stuck, stuck});
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    lost.runner->Stop(v1::FAILED, "worker w-1 lost", absl::StatusCode::kUnavailable, "w-1");
  });
  JobOutcome outcome = lost.runner->Run();
  stopper.join();
  EXPECT_EQ(outcome.cause, absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.reason, "worker w-1 lost");
  // A lost worker gets no Abort (it would only wait out the deadline on a
  // stopped process); the survivor does.
  EXPECT_NE(lost.workers[0]->commands().back(), "Abort");
  EXPECT_EQ(lost.workers[1]->commands().back(), "Abort");
  EXPECT_EQ(outcome.unreachable_workers, std::vector<std::string>{"w-1"});
  EXPECT_EQ(outcome.idle_workers, std::vector<std::string>{"w-2"});

  Harness cancelled(Spec(100), {stuck});
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    cancelled.runner->Stop(v1::CANCELLED, "cancelled by user", absl::StatusCode::kUnavailable);
  });
  EXPECT_EQ(cancelled.runner->Run().cause, absl::StatusCode::kCancelled);
  canceller.join();
}

TEST(JobRunner, ARestartedAttemptResumesWhereItIsToldAndNumbersItsRecords) {
  const std::string root = FreshRoot("restarted-attempt");
  JobAttempt attempt;
  attempt.number = 2;
  attempt.resume_step = 4;  // as the coordinator resolved it; not read from disk
  Harness h(CheckpointingSpec(8, 2, root), {{}, {}}, attempt);
  JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(outcome.first_step, 4);
  EXPECT_EQ(outcome.committed_step, 8);
  EXPECT_EQ(h.commits, (std::vector<int>{6, 8}));
  EXPECT_EQ(outcome.idle_workers.size(), 2u);
  EXPECT_EQ(h.workers[0]->resume_step(), 4);
  ASSERT_EQ(h.metrics.size(), 4u);
  for (size_t i = 0; i < h.metrics.size(); ++i) {
    EXPECT_EQ(h.metrics[i].step(), 4 + static_cast<int>(i));
    EXPECT_EQ(h.metrics[i].attempt(), 2);
  }
  ASSERT_FALSE(h.reasons.empty());
  EXPECT_EQ(h.reasons[0], "attempt 3: setting up shards on 2 workers, resuming from step 4");
}

TEST(JobRunner, ARestartWithoutACheckpointSaysItStartsAgain) {
  JobAttempt attempt;
  attempt.number = 1;
  attempt.resume_step = 0;
  Harness h(Spec(3), {{}}, attempt);
  ASSERT_EQ(h.runner->Run().state, v1::SUCCEEDED);
  ASSERT_FALSE(h.reasons.empty());
  EXPECT_EQ(h.reasons[0],
            "attempt 2: setting up shards on 1 workers, starting again from step 0 (no checkpoint "
            "committed)");
  EXPECT_EQ(h.metrics.size(), 3u);
}

// Runs the job on its own thread; WaitForSteps blocks until `n` step
// records are in.
struct Running {
  explicit Running(Harness& h) : h(h), thread([this] { outcome = this->h.runner->Run(); }) {}
  ~Running() {
    if (thread.joinable()) thread.join();
  }
  void WaitForSteps(size_t n) {
    absl::MutexLock lock(&h.mu);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(h.mu) { return h.metrics.size() >= n; };
    ASSERT_TRUE(h.mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }
  JobOutcome Join() {
    thread.join();
    return outcome;
  }
  Harness& h;
  JobOutcome outcome;
  std::thread thread;
};

// The step of the command `prefix@STEP` a worker saw (-1: none).
int StepOf(const std::vector<std::string>& commands, const std::string& prefix) {
  for (const std::string& c : commands) {
    if (c.rfind(prefix + "@", 0) == 0) return std::stoi(c.substr(prefix.size() + 1));
  }
  return -1;
}

TEST(JobRunner, CheckpointNowCommitsAStepMidChunkAndTheJobGoesOn) {
  const std::string root = FreshRoot("checkpoint-now");
  Harness h(CheckpointingSpec(300, 100, root), {{}, {}});
  Running run(h);
  run.WaitForSteps(5);
  ASSERT_TRUE(h.runner->CheckpointNow().ok());
  const JobOutcome outcome = run.Join();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  // Both ranks were told the same step, past the steps already reported and
  // before the chunk's end; it was committed, then the chunks went on to
  // the interval's boundaries.
  const int at = StepOf(h.workers[0]->commands(), "EndChunkAt");
  EXPECT_EQ(StepOf(h.workers[1]->commands(), "EndChunkAt"), at);
  EXPECT_GT(at, 5);
  EXPECT_LT(at, 100);
  EXPECT_EQ(h.commits, (std::vector<int>{at, 100, 200, 300}));
  ASSERT_EQ(h.metrics.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(h.metrics[i].step(), i);
  // (The write's AwaitCheckpoint runs beside the steps, in no fixed place.)
  std::vector<std::string> c = MainCommands(h.workers[0]);
  const auto hold = std::find(c.begin(), c.end(), "HoldSteps");
  ASSERT_NE(hold, c.end());
  EXPECT_EQ(std::vector<std::string>(hold, hold + 4),
            (std::vector<std::string>{"HoldSteps", "EndChunkAt@" + std::to_string(at),
                                      "Checkpoint@" + std::to_string(at), "RunSteps"}));
}

TEST(JobRunner, SuspendEndsTheAttemptSuspendedAtTheStepItCommitted) {
  const std::string root = FreshRoot("suspend");
  Harness h(CheckpointingSpec(100000, 0, root), {{}, {}});
  Running run(h);
  run.WaitForSteps(5);
  ASSERT_TRUE(h.runner->Suspend("node maintenance").ok());
  ASSERT_TRUE(h.runner->Suspend("asked twice").ok());  // the same suspend
  const JobOutcome outcome = run.Join();
  ASSERT_EQ(outcome.state, v1::SUSPENDED) << outcome.reason;
  const int at = outcome.committed_step;
  EXPECT_GT(at, 5);
  EXPECT_EQ(outcome.reason,
            absl::StrCat("suspended at step ", at, " (checkpoint committed): node maintenance"));
  EXPECT_EQ(h.commits, std::vector<int>{at});
  EXPECT_EQ(*ListCommittedSteps(root), std::vector<int64_t>{at});
  // Every step before it, once, and none after.
  ASSERT_EQ(h.metrics.size(), static_cast<size_t>(at));
  for (int i = 0; i < at; ++i) EXPECT_EQ(h.metrics[i].step(), i);
  // The workers were released.
  EXPECT_EQ(outcome.idle_workers, (std::vector<std::string>{"w-1", "w-2"}));
  for (FakeWorkerConnection* w : h.workers) {
    // The suspend waited for the write to be awaited and committed.
    std::vector<std::string> c = w->commands();
    EXPECT_EQ(std::vector<std::string>(c.end() - 5, c.end()),
              (std::vector<std::string>{"HoldSteps", "EndChunkAt@" + std::to_string(at),
                                        "Checkpoint@" + std::to_string(at),
                                        "AwaitCheckpoint@" + std::to_string(at), "Abort"}));
  }
  EXPECT_TRUE(h.errors.empty());
  EXPECT_EQ(h.runner->Suspend("after the end").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JobRunner, EveryRankStopsAtTheStepOfTheRankFurthestAhead) {
  // Fakes do not move in lock step, so one rank runs far ahead of the
  // other; the slow one catches up to where the fast one stopped.
  FakeWorkerBehavior fast;
  fast.step_time = absl::Milliseconds(1);
  FakeWorkerBehavior slow;
  slow.step_time = absl::Milliseconds(6);
  Harness h(CheckpointingSpec(100000, 0, FreshRoot("ranks-apart")), {fast, slow});
  Running run(h);
  run.WaitForSteps(5);
  ASSERT_TRUE(h.runner->Suspend("").ok());
  const JobOutcome outcome = run.Join();
  ASSERT_EQ(outcome.state, v1::SUSPENDED) << outcome.reason;
  EXPECT_EQ(outcome.reason,
            absl::StrCat("suspended at step ", outcome.committed_step, " (checkpoint committed)"));
  EXPECT_EQ(StepOf(h.workers[0]->commands(), "EndChunkAt"), outcome.committed_step);
  EXPECT_EQ(StepOf(h.workers[1]->commands(), "EndChunkAt"), outcome.committed_step);
  EXPECT_GT(outcome.committed_step, 6);  // where the fast rank was, not the slow one
  EXPECT_EQ(h.metrics.size(), static_cast<size_t>(outcome.committed_step));
}

TEST(JobRunner, ASuspendBeforeAnyStepStillRunsAndCommitsOne) {
  const std::string root = FreshRoot("suspend-first");
  Harness h(CheckpointingSpec(1000, 0, root), {{}, {}});
  ASSERT_TRUE(h.runner->Suspend("").ok());
  const JobOutcome outcome = h.runner->Run();
  ASSERT_EQ(outcome.state, v1::SUSPENDED) << outcome.reason;
  EXPECT_GE(outcome.committed_step, 1);  // never a checkpoint of step 0
  EXPECT_EQ(h.metrics.size(), static_cast<size_t>(outcome.committed_step));
  EXPECT_EQ(*ListCommittedSteps(root), std::vector<int64_t>{outcome.committed_step});
}

TEST(JobRunner, ASuspendWhoseBoundaryIsTheLastStepSucceeds) {
  const std::string root = FreshRoot("suspend-last");
  Harness h(CheckpointingSpec(1, 0, root), {{}, {}});
  ASSERT_TRUE(h.runner->Suspend("").ok());
  const JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  EXPECT_EQ(h.commits, std::vector<int>{1});
}

TEST(JobRunner, CheckpointNowAndSuspendNeedACheckpointDir) {
  Harness h(Spec(10), {{}});
  for (const absl::Status& s : {h.runner->CheckpointNow(), h.runner->Suspend("")}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("checkpoint.dir"), std::string::npos) << s;
  }
  const JobOutcome outcome = h.runner->Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED);
  EXPECT_EQ(StepOf(h.workers[0]->commands(), "EndChunkAt"), -1);
}

// Waits until rank 0 has begun writing the checkpoint of `step`.
void WaitForCheckpointCall(Harness& h, int step) {
  const std::string call = "Checkpoint@" + std::to_string(step);
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
    const std::vector<std::string> c = h.workers[0]->commands();
    if (std::find(c.begin(), c.end(), call) != c.end()) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
  ADD_FAILURE() << "no " << call;
}

TEST(JobRunner, ASuspendAskedWhileACheckpointIsWrittenStopsAtIt) {
  FakeWorkerBehavior slow_checkpoints;
  slow_checkpoints.checkpoint_time = absl::Milliseconds(200);
  Harness h(CheckpointingSpec(200, 50, FreshRoot("suspend-during-checkpoint")),
            {slow_checkpoints, slow_checkpoints});
  Running run(h);
  WaitForCheckpointCall(h, 50);
  ASSERT_TRUE(h.runner->Suspend("").ok());
  const JobOutcome outcome = run.Join();
  ASSERT_EQ(outcome.state, v1::SUSPENDED) << outcome.reason;
  EXPECT_EQ(outcome.committed_step, 50);
  EXPECT_EQ(h.commits, std::vector<int>{50});
  EXPECT_EQ(StepOf(h.workers[0]->commands(), "EndChunkAt"), -1);  // no step more
}

TEST(JobRunner, ACheckpointAskedWhileAnotherIsWrittenGetsItsOwn) {
  FakeWorkerBehavior slow_checkpoints;
  slow_checkpoints.checkpoint_time = absl::Milliseconds(200);
  Harness h(CheckpointingSpec(200, 50, FreshRoot("checkpoint-during-checkpoint")),
            {slow_checkpoints, slow_checkpoints});
  Running run(h);
  WaitForCheckpointCall(h, 50);
  ASSERT_TRUE(h.runner->CheckpointNow().ok());
  const JobOutcome outcome = run.Join();
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  // Committed after it was asked: early in the next chunk.
  ASSERT_EQ(h.commits.size(), 5u);
  EXPECT_EQ(h.commits[0], 50);
  EXPECT_GT(h.commits[1], 50);
  EXPECT_LT(h.commits[1], 100);
  EXPECT_EQ(std::vector<int>(h.commits.begin() + 2, h.commits.end()),
            (std::vector<int>{100, 150, 200}));
}

}  // namespace
}  // namespace tessera

// Checkpoint now, suspend and resume through the coordinator core with
// in-memory workers: a checkpoint mid-run while the job goes on; suspend to
// SUSPENDED with the committed step and the workers free for other jobs,
// then resume from that step to SUCCEEDED; a suspended job surviving a
// coordinator restart; cancelling one; a stopping worker's heartbeat
// suspending its job (or saying why not); and every refusal with its code.
#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_core_test_base.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

constexpr auto kFailedPrecondition = absl::StatusCode::kFailedPrecondition;

// A two-rank job long enough to be asked for things while it runs (1 ms
// steps), checkpointing into `dir` at the end only unless asked.
v1::JobSpec LongJob(const std::string& dir, int steps = 100000) {
  v1::JobSpec spec = TinyJobSpec(2, steps);
  if (!dir.empty()) spec.mutable_checkpoint()->set_dir(TestTempPath(dir));
  return spec;
}

class CoordinatorSuspendTest : public CoordinatorCoreTest {
 protected:
  void Make(const std::string& state_dir = "") {
    CoordinatorOptions options = InMemoryOptions();
    options.state_dir = state_dir;
    StartCore(std::move(options));
  }
  // Submits `spec` and waits until it is RUNNING with a few steps done.
  std::string StartRunning(const v1::JobSpec& spec) {
    const std::string id = core_->SubmitJob(spec)->id();
    WaitUntilRunningSteps(id);
    return id;
  }
  std::vector<int> Commits(const std::string& id) {
    std::vector<int> out;
    for (const v1::JobEvent& e : Events(id)) {
      if (e.has_checkpoint()) out.push_back(e.checkpoint().step());
    }
    return out;
  }
  void ExpectWorkersFree() {
    for (const v1::WorkerRecord& w : core_->ListWorkers()) {
      EXPECT_TRUE(w.job_id().empty()) << w.DebugString();
      EXPECT_TRUE(w.activity().job_id().empty()) << w.DebugString();
    }
  }
};

TEST_F(CoordinatorSuspendTest, CheckpointNowCommitsMidRunAndTheJobGoesOnToSucceed) {
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  const std::string id = StartRunning(LongJob("checkpoint-now", 400));
  absl::StatusOr<v1::Job> asked = core_->CheckpointJob(id);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::RUNNING);
  v1::Job done = WaitForState(id, v1::SUCCEEDED);
  const std::vector<int> commits = Commits(id);
  ASSERT_EQ(commits.size(), 2u);
  EXPECT_GT(commits[0], 3);
  EXPECT_LT(commits[0], 400);
  EXPECT_EQ(commits[1], 400);
  EXPECT_EQ(done.steps_done(), 400);
  EXPECT_EQ(Transitions(id),
            (std::vector<std::string>{"PENDING", "STARTING", "RUNNING", "SUCCEEDED"}));
}

TEST_F(CoordinatorSuspendTest, SuspendReleasesTheWorkersAndResumeContinuesFromTheCommittedStep) {
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  constexpr int kSteps = 600;
  const std::string id = StartRunning(LongJob("suspend", kSteps));
  absl::StatusOr<v1::Job> asked = core_->SuspendJob(id, "node maintenance");
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::RUNNING);
  EXPECT_EQ(asked->reason(), "suspending at the next step boundary (node maintenance)");
  EXPECT_TRUE(core_->SuspendJob(id, "").ok());  // asked again while pending

  const v1::Job suspended = WaitForState(id, v1::SUSPENDED);
  const int at = suspended.committed_step();
  ASSERT_GT(at, 3);
  ASSERT_LT(at, kSteps);
  EXPECT_EQ(suspended.reason(), absl::StrCat("suspended at step ", at,
                                             " (checkpoint committed): node maintenance"));
  EXPECT_EQ(suspended.steps_done(), at);
  EXPECT_EQ(suspended.queue_position(), 0);
  EXPECT_EQ(Commits(id), std::vector<int>{at});
  ExpectWorkersFree();
  // The freed workers run another job while this one is suspended.
  const std::string other = core_->SubmitJob(TinyJobSpec(2, 3))->id();
  EXPECT_EQ(WaitForState(other, v1::SUCCEEDED).state(), v1::SUCCEEDED);
  core_->Tick();
  EXPECT_EQ(core_->GetJob(id)->state(), v1::SUSPENDED);

  absl::StatusOr<v1::Job> resumed = core_->ResumeJob(id);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), v1::PENDING);
  const v1::Job done = WaitForState(id, v1::SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);  // a resume is not a restart
  EXPECT_EQ(done.steps_done(), kSteps);
  EXPECT_EQ(Commits(id), (std::vector<int>{at, kSteps}));
  std::vector<std::string> reasons;
  std::vector<int> steps;
  for (const v1::JobEvent& e : Events(id)) {
    if (e.has_state_change()) reasons.push_back(e.state_change().reason());
    if (e.has_step()) steps.push_back(e.step().step());
  }
  EXPECT_EQ(Transitions(id),
            (std::vector<std::string>{"PENDING", "STARTING", "RUNNING", "SUSPENDED", "PENDING",
                                      "STARTING", "RUNNING", "SUCCEEDED"}));
  EXPECT_EQ(reasons[4], absl::StrCat("resumed; will continue from checkpoint step ", at));
  EXPECT_EQ(reasons[5], absl::StrCat("setting up shards on 2 workers, resuming from step ", at));
  // Every step exactly once: none ran after the suspended step before it.
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(steps[i], i);
  ExpectWorkersFree();
}

TEST_F(CoordinatorSuspendTest, EveryRefusalHasItsCode) {
  Make();
  for (const std::string& unknown : {std::string("job-9")}) {
    EXPECT_EQ(core_->CheckpointJob(unknown).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(core_->SuspendJob(unknown, "").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(core_->ResumeJob(unknown).status().code(), absl::StatusCode::kNotFound);
  }
  const std::string huge(1000, 'j');
  EXPECT_EQ(core_->CheckpointJob(huge).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->SuspendJob(huge, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ResumeJob(huge).status().code(), absl::StatusCode::kInvalidArgument);

  // Queued (no workers yet): not RUNNING.
  const std::string queued = core_->SubmitJob(LongJob("refusals"))->id();
  for (const absl::Status& s :
       {core_->CheckpointJob(queued).status(), core_->SuspendJob(queued, "").status()}) {
    EXPECT_EQ(s.code(), kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("is PENDING; only a RUNNING job"), std::string::npos) << s;
  }
  absl::Status not_suspended = core_->ResumeJob(queued).status();
  EXPECT_EQ(not_suspended.code(), kFailedPrecondition);
  EXPECT_NE(not_suspended.message().find("is PENDING; only a SUSPENDED job can be resumed"),
            std::string::npos)
      << not_suspended;

  // Running without a checkpoint.dir: refused naming the field.
  AddWorker("h:1");
  AddWorker("h:2");
  WaitForState(queued, v1::RUNNING);
  ASSERT_TRUE(core_->CancelJob(queued, "").ok());
  WaitForState(queued, v1::CANCELLED);
  const std::string no_dir = StartRunning(LongJob(""));
  for (const absl::Status& s :
       {core_->CheckpointJob(no_dir).status(), core_->SuspendJob(no_dir, "").status()}) {
    EXPECT_EQ(s.code(), kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("checkpoint.dir"), std::string::npos) << s;
  }
  EXPECT_EQ(core_->GetJob(no_dir)->state(), v1::RUNNING);  // untouched
  ASSERT_TRUE(core_->CancelJob(no_dir, "").ok());
  WaitForState(no_dir, v1::CANCELLED);

  // Ended: refused; the same for a suspended job, except resume.
  for (const absl::Status& s :
       {core_->CheckpointJob(queued).status(), core_->SuspendJob(queued, "").status(),
        core_->ResumeJob(queued).status()}) {
    EXPECT_EQ(s.code(), kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("CANCELLED"), std::string::npos) << s;
  }
  const std::string id = StartRunning(LongJob("refusals-suspended"));
  ASSERT_TRUE(core_->SuspendJob(id, "").ok());
  WaitForState(id, v1::SUSPENDED);
  for (const absl::Status& s :
       {core_->CheckpointJob(id).status(), core_->SuspendJob(id, "").status()}) {
    EXPECT_EQ(s.code(), kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("is SUSPENDED; only a RUNNING job"), std::string::npos) << s;
  }
  // Not ended, so not deletable; a suspended job can be cancelled.
  EXPECT_EQ(core_->DeleteJob(id).code(), kFailedPrecondition);
  ASSERT_TRUE(core_->ResumeJob(id).ok());
  EXPECT_EQ(core_->ResumeJob(id).status().code(), kFailedPrecondition);  // queued again
  ASSERT_TRUE(core_->CancelJob(id, "").ok());
}

TEST_F(CoordinatorSuspendTest, ASuspendedJobCanBeCancelled) {
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  const std::string id = StartRunning(LongJob("cancel-suspended"));
  ASSERT_TRUE(core_->SuspendJob(id, "").ok());
  WaitForState(id, v1::SUSPENDED);
  absl::StatusOr<v1::Job> cancelled = core_->CancelJob(id, "not needed");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_TRUE(core_->DeleteJob(id).ok());
}

TEST_F(CoordinatorSuspendTest, ASuspendedJobSurvivesACoordinatorRestartAndResumes) {
  const std::string state_dir = TestTempPath("suspend-state");
  mkdir(state_dir.c_str(), 0755);
  Make(state_dir);
  AddWorker("h:1");
  AddWorker("h:2");
  constexpr int kSteps = 400;
  const std::string id = StartRunning(LongJob("suspend-restart", kSteps));
  ASSERT_TRUE(core_->SuspendJob(id, "").ok());
  const int at = WaitForState(id, v1::SUSPENDED).committed_step();
  ASSERT_GT(at, 0);
  core_->Shutdown();  // cancels queued and running jobs, not suspended ones

  Make(state_dir);
  v1::Job reloaded = *core_->GetJob(id);
  EXPECT_EQ(reloaded.state(), v1::SUSPENDED);
  EXPECT_EQ(reloaded.committed_step(), at);
  AddWorker("h:3");
  AddWorker("h:4");
  core_->Tick();
  EXPECT_EQ(core_->GetJob(id)->state(), v1::SUSPENDED);  // not queued by itself
  ASSERT_TRUE(core_->ResumeJob(id).ok());
  const v1::Job done = WaitForState(id, v1::SUCCEEDED);
  EXPECT_EQ(Commits(id), (std::vector<int>{at, kSteps}));
  EXPECT_EQ(done.steps_done(), kSteps);
}

TEST_F(CoordinatorSuspendTest, AStoppingWorkersJobIsSuspendedWhereItCanBe) {
  Make();
  const std::string w1 = AddWorker("h:1");
  const std::string w2 = AddWorker("h:2");
  // A stopping worker reports itself unhealthy (no new work); the first
  // cases keep w2 usable for the next ones.
  auto stopping = [this, &w2](bool healthy = false) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w2);
    req.set_address("h:2");
    req.set_healthy(healthy);
    req.set_stopping(true);
    return *core_->Heartbeat(req);
  };
  // Idle: nothing to suspend.
  v1::HeartbeatResponse idle = stopping(/*healthy=*/true);
  EXPECT_FALSE(idle.suspending());
  EXPECT_TRUE(idle.not_suspended_reason().empty());

  // No checkpoint.dir: refused, naming the field; the job runs on.
  const std::string no_dir = StartRunning(LongJob(""));
  v1::HeartbeatResponse refused = stopping(/*healthy=*/true);
  EXPECT_FALSE(refused.suspending());
  EXPECT_NE(refused.not_suspended_reason().find("checkpoint.dir"), std::string::npos)
      << refused.not_suspended_reason();
  EXPECT_EQ(core_->GetJob(no_dir)->state(), v1::RUNNING);
  ASSERT_TRUE(core_->CancelJob(no_dir, "").ok());
  WaitForState(no_dir, v1::CANCELLED);

  const std::string id = StartRunning(LongJob("stopping-worker"));
  v1::HeartbeatResponse answer = stopping();
  EXPECT_TRUE(answer.suspending());
  EXPECT_TRUE(answer.not_suspended_reason().empty());
  EXPECT_TRUE(stopping().suspending());  // every later heartbeat says so too
  const v1::Job suspended = WaitForState(id, v1::SUSPENDED);
  EXPECT_NE(suspended.reason().find(absl::StrCat("worker ", w2, " is shutting down")),
            std::string::npos)
      << suspended.reason();
  EXPECT_GT(suspended.committed_step(), 0);
  ExpectWorkersFree();
  // The stopping worker takes no new job.
  v1::JobSpec one = TinyJobSpec(1, 3);
  const std::string next = core_->SubmitJob(one)->id();
  ASSERT_EQ(WaitForState(next, v1::SUCCEEDED).worker_ids_size(), 1);
  EXPECT_EQ(core_->GetJob(next)->worker_ids(0), w1);
}

}  // namespace
}  // namespace tessera

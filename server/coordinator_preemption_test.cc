// Priorities and preemption through the coordinator core with in-memory
// workers: a high-priority job preempts a running lower-priority one, which
// is suspended at a step boundary, queued again and resumes by itself from
// its checkpoint, every step once, with the cost reported on both sides; a
// job without checkpoint.dir is never preempted and the preemptor's reason
// says so; a person's suspend asked while a preemption is in flight keeps
// the victim SUSPENDED; the dry-run placement (ExplainPlacement); and a job
// queued again after a suspend that survives a coordinator crash resumes
// from its committed step rather than from step 0.
#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/spec_defaults.h"
#include "gtest/gtest.h"
#include "server/checkpoint_commit.h"
#include "server/coordinator.h"
#include "server/coordinator_core_test_base.h"
#include "server/fake_worker_connection.h"
#include "server/job_store.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

// A two-rank job at `priority`, checkpointing into `dir` (none if empty)
// only when asked or at its end.
v1::JobSpec Job(int priority, const std::string& dir, int steps) {
  v1::JobSpec spec = TinyJobSpec(2, steps);
  spec.set_priority(priority);
  if (!dir.empty()) spec.mutable_checkpoint()->set_dir(TestTempPath(dir));
  return spec;
}

class CoordinatorPreemptionTest : public CoordinatorCoreTest {
 protected:
  void Make(FakeWorkerBehavior behavior = {}, const std::string& state_dir = "") {
    CoordinatorOptions options = InMemoryOptions(behavior);
    options.state_dir = state_dir;
    StartCore(std::move(options));
  }
  // Submits `spec` and waits until it is RUNNING with a few steps done.
  std::string StartRunning(const v1::JobSpec& spec) {
    const std::string id = core_->SubmitJob(spec)->id();
    WaitUntilRunningSteps(id);
    return id;
  }
  std::vector<v1::Preemption> Preemptions(const std::string& id) {
    std::vector<v1::Preemption> out;
    for (const v1::JobEvent& e : Events(id)) {
      if (e.has_preemption()) out.push_back(e.preemption());
    }
    return out;
  }
};

TEST_F(CoordinatorPreemptionTest, AHigherPriorityJobPreemptsAndTheVictimResumesByItself) {
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  constexpr int kSteps = 500;
  const std::string low = StartRunning(Job(2, "preempted", kSteps));
  const std::string high = core_->SubmitJob(Job(8, "", 20))->id();

  const v1::Job requeued = WaitFor(low, [](const v1::Job& j) { return j.preemptions() == 1; });
  EXPECT_EQ(WaitForState(high, v1::SUCCEEDED).state(), v1::SUCCEEDED);
  const v1::Job done = WaitForState(low, v1::SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);  // a preemption is not a restart
  EXPECT_EQ(done.preemptions(), 1);
  EXPECT_EQ(done.steps_done(), kSteps);
  (void)requeued;

  EXPECT_EQ(Transitions(low),
            (std::vector<std::string>{"PENDING", "STARTING", "RUNNING", "SUSPENDED", "PENDING",
                                      "STARTING", "RUNNING", "SUCCEEDED"}));
  std::vector<std::string> reasons;
  std::vector<int> steps;
  for (const v1::JobEvent& e : Events(low)) {
    if (e.has_state_change()) reasons.push_back(e.state_change().reason());
    if (e.has_step()) steps.push_back(e.step().step());
  }
  // The SUSPENDED and PENDING events say it was preempted and resumes by
  // itself, unlike a person's suspend.
  EXPECT_TRUE(absl::StrContains(reasons[3], "(checkpoint committed): preempted by " + high +
                                                " (priority 8); queued again to resume"))
      << reasons[3];
  EXPECT_TRUE(absl::StartsWith(reasons[4], "preempted by " + high + " (priority 8); resumes from "
                                           "checkpoint step "))
      << reasons[4];
  // Every step exactly once: nothing ran past the boundary it stopped at.
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) ASSERT_EQ(steps[i], i);

  // The victim's events: the decision, then its cost.
  const std::vector<v1::Preemption> victim = Preemptions(low);
  ASSERT_EQ(victim.size(), 2u);
  EXPECT_EQ(victim[0].stage(), v1::Preemption::DECIDED);
  EXPECT_EQ(victim[0].preemptor_job_id(), high);
  EXPECT_EQ(victim[0].preemptor_priority(), 8);
  EXPECT_TRUE(absl::StrContains(victim[0].reason(), low + " (priority 2, 2 workers)"))
      << victim[0].reason();
  EXPECT_TRUE(absl::StrContains(victim[0].reason(), "lowest priority first")) << victim[0].reason();
  EXPECT_EQ(victim[1].stage(), v1::Preemption::WORKERS_FREE);
  EXPECT_TRUE(victim[1].requeued());
  EXPECT_GT(victim[1].stopped_at_step(), 3);
  EXPECT_EQ(victim[1].resume_step(), victim[1].stopped_at_step());
  EXPECT_EQ(victim[1].steps_redone(), 0);
  EXPECT_GE(victim[1].seconds_to_free(), 0.0);
  EXPECT_LT(victim[1].seconds_to_free(), 30.0);
  // The preemptor's: the same decision naming its victims, and the cost.
  const std::vector<v1::Preemption> preemptor = Preemptions(high);
  ASSERT_EQ(preemptor.size(), 2u);
  EXPECT_EQ(preemptor[0].stage(), v1::Preemption::DECIDED);
  ASSERT_EQ(preemptor[0].victim_job_ids_size(), 1);
  EXPECT_EQ(preemptor[0].victim_job_ids(0), low);
  EXPECT_EQ(preemptor[1].stage(), v1::Preemption::WORKERS_FREE);
  EXPECT_EQ(preemptor[1].seconds_to_free(), victim[1].seconds_to_free());
  for (const v1::WorkerRecord& w : core_->ListWorkers()) EXPECT_TRUE(w.job_id().empty());
}

TEST_F(CoordinatorPreemptionTest, AJobWithoutACheckpointDirIsNeverPreempted) {
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  const std::string low = StartRunning(Job(1, "", 100000));
  const std::string high = core_->SubmitJob(Job(9, "", 10))->id();
  for (int i = 0; i < 20; ++i) core_->Tick();
  const v1::Job waiting = *core_->GetJob(high);
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_TRUE(absl::StrContains(waiting.reason(), "busy with " + low + " (priority 1, 2 workers)"))
      << waiting.reason();
  EXPECT_TRUE(absl::StrContains(waiting.reason(),
                                "not preemptible: " + low + " (priority 1) has no checkpoint.dir"))
      << waiting.reason();
  EXPECT_EQ(core_->GetJob(low)->state(), v1::RUNNING);
  EXPECT_TRUE(Preemptions(low).empty());
  EXPECT_TRUE(Preemptions(high).empty());
  ASSERT_TRUE(core_->CancelJob(low, "").ok());
  EXPECT_EQ(WaitForState(high, v1::SUCCEEDED).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorPreemptionTest, APersonsSuspendDuringAPreemptionKeepsTheVictimSuspended) {
  FakeWorkerBehavior held;
  held.checkpoint_write_gate = std::make_shared<absl::Notification>();
  Make(held);
  AddWorker("h:1");
  AddWorker("h:2");
  const std::string low = StartRunning(Job(2, "explicit", 100000));
  const std::string high = core_->SubmitJob(Job(8, "", 10))->id();
  WaitFor(low, [](const v1::Job& j) { return absl::StartsWith(j.reason(), "being preempted"); });
  // The suspend checkpoint's write is held, so the attempt is still going.
  ASSERT_TRUE(core_->SuspendJob(low, "maintenance").ok());
  held.checkpoint_write_gate->Notify();
  const v1::Job suspended = WaitForState(low, v1::SUSPENDED);
  EXPECT_EQ(WaitForState(high, v1::SUCCEEDED).state(), v1::SUCCEEDED);
  for (int i = 0; i < 5; ++i) core_->Tick();
  EXPECT_EQ(core_->GetJob(low)->state(), v1::SUSPENDED);  // waits for a resume
  EXPECT_EQ(core_->GetJob(low)->preemptions(), 0);
  const std::vector<v1::Preemption> events = Preemptions(low);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[1].requeued());
  EXPECT_TRUE(absl::StrContains(events[1].reason(), "waits for a resume")) << events[1].reason();
  ASSERT_TRUE(core_->ResumeJob(low).ok());
  ASSERT_TRUE(core_->CancelJob(low, "").ok());
  (void)suspended;
}

TEST_F(CoordinatorPreemptionTest, ExplainPlacementSaysWhereWhomOrWhyAndCreatesNothing) {
  Make();
  constexpr int64_t kGiB = int64_t{1} << 30;
  const std::string a = AddWorker("h:1", 64 * kGiB);
  const std::string b = AddWorker("h:2", 0);  // size not reported

  absl::StatusOr<v1::PlacementExplanation> now = core_->ExplainPlacement(Job(0, "", 10));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->outcome(), v1::PlacementExplanation::START_NOW);
  EXPECT_EQ(now->worker_ids_size(), 2);
  EXPECT_EQ(now->priority(), 5);
  EXPECT_GT(now->rank_memory_bytes(), 0);
  ASSERT_EQ(now->workers_size(), 2);
  EXPECT_EQ(now->workers(0).worker_id(), a);
  EXPECT_EQ(now->workers(0).memory_fit(), v1::CandidateWorker::FITS);
  EXPECT_EQ(now->workers(1).memory_fit(), v1::CandidateWorker::UNKNOWN);
  EXPECT_TRUE(absl::StrContains(now->reason(), "would start now on 2 free CPU workers")) << now->reason();

  const std::string low = StartRunning(Job(2, "explained", 100000));
  absl::StatusOr<v1::PlacementExplanation> preempt = core_->ExplainPlacement(Job(7, "", 10));
  ASSERT_TRUE(preempt.ok()) << preempt.status();
  EXPECT_EQ(preempt->outcome(), v1::PlacementExplanation::PREEMPT);
  ASSERT_EQ(preempt->preempt_job_ids_size(), 1);
  EXPECT_EQ(preempt->preempt_job_ids(0), low);
  EXPECT_EQ(preempt->workers(0).busy_with_job_id(), low);
  EXPECT_EQ(preempt->workers(0).busy_with_priority(), 2);

  absl::StatusOr<v1::PlacementExplanation> wait = core_->ExplainPlacement(Job(2, "", 10));
  ASSERT_TRUE(wait.ok()) << wait.status();
  EXPECT_EQ(wait->outcome(), v1::PlacementExplanation::WAIT);
  EXPECT_TRUE(absl::StrContains(wait->reason(), "busy with " + low + " (priority 2, 2 workers)"))
      << wait->reason();
  EXPECT_EQ(wait->queue_position(), 1);

  v1::JobSpec bad = Job(10, "", 10);
  EXPECT_EQ(core_->ExplainPlacement(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(core_->ExplainPlacement(bad).status().message(), "priority"));

  // Nothing was created and the running job was left alone.
  absl::StatusOr<Coordinator::JobPage> jobs = core_->ListJobs({});
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->jobs.size(), 1u);
  for (int i = 0; i < 5; ++i) core_->Tick();
  EXPECT_EQ(core_->GetJob(low)->state(), v1::RUNNING);
  EXPECT_TRUE(Preemptions(low).empty());
  ASSERT_TRUE(core_->CancelJob(low, "").ok());
}

// A job queued again after a suspend (or a preemption) holds a committed
// step. A coordinator killed while it waited once reloaded it as a fresh
// job, and it started over from step 0.
TEST_F(CoordinatorPreemptionTest, AQueuedAgainJobResumesFromItsCheckpointAfterACrash) {
  const std::string state_dir = TestTempPath("requeued-state");
  mkdir(state_dir.c_str(), 0755);
  v1::JobSpec spec = TinyJobSpec(1, 10);
  spec.mutable_checkpoint()->set_dir(TestTempPath("requeued-ckpt"));
  {
    FakeWorkerConnection writer(0, {});
    v1::CheckpointRequest request;
    request.set_dir(spec.checkpoint().dir());
    request.set_step(6);
    ASSERT_TRUE(writer.Checkpoint(request).ok());
    ASSERT_TRUE(CommitStep(spec.checkpoint().dir(), 6, 1).ok());
  }
  {
    auto store = JobStore::Open(state_dir + "/coordinator.db");
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Job job;
    job.set_id("job-3");
    *job.mutable_spec() = WithDefaults(spec);
    job.set_state(v1::PENDING);
    job.set_steps_done(6);
    job.set_committed_step(6);
    v1::JobEvent e;
    e.set_sequence(1);
    e.mutable_state_change()->set_state(v1::PENDING);
    e.mutable_state_change()->set_reason("resumed; will continue from checkpoint step 6");
    ASSERT_TRUE((*store)->PutJobWithEvent(job, e).ok());
  }
  Make({}, state_dir);
  AddWorker("h:1");
  const v1::Job done = WaitForState("job-3", v1::SUCCEEDED);
  std::vector<int> steps;
  for (const v1::JobEvent& e : Events("job-3")) {
    if (e.has_step()) steps.push_back(e.step().step());
  }
  EXPECT_EQ(steps, (std::vector<int>{6, 7, 8, 9}));
  EXPECT_EQ(done.steps_done(), 10);
}

}  // namespace
}  // namespace tessera

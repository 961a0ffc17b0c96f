// The coordinator core without a server: validation before queueing (also
// of the sizes that once broke it), NOT_FOUND, cancel semantics, scheduling
// a gang, a lost worker failing its job, job records surviving a restart
// through the state directory (with their event history, a running job
// resuming from its checkpoint or failing without one), bounded request
// strings and stored reasons,
// ListJobs pages, deleting finished jobs, backfill past a job that cannot
// be placed, MFU in the step metrics, automatic restarts (resume point,
// attempt numbers, the budget, non-retryable failures, cancel while
// restarting) and reconciling what workers report with what they were
// assigned.
#include "server/coordinator.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/checkpoint_commit.h"
#include "server/fake_worker_connection.h"
#include "server/job_store.h"
#include "server/spec_validation.h"
#include "server/tiny_job_spec_for_test.h"
#include "server/model_flops.h"

namespace tessera {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  void Make(FakeWorkerBehavior behavior = {}, std::string state_dir = "") {
    MakeWith([behavior](int) { return behavior; }, state_dir);
  }
  // `behavior(n)` for the n-th connection opened (two per attempt of a
  // 2-rank job).
  void MakeWith(std::function<FakeWorkerBehavior(int)> behavior, std::string state_dir = "") {
    CoordinatorOptions options;
    options.state_dir = state_dir;
    options.start_background_thread = false;
    options.worker_timeout = absl::Seconds(5);
    options.starvation_timeout = starvation_timeout_;
    options.now = [this] { return now_; };
    options.connect = FakeWorkerConnector(std::move(behavior));
    core_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(core_->Start().ok());
  }
  std::string AddWorker(const std::string& address) {
    v1::RegisterWorkerRequest req;
    req.set_address(address);
    req.mutable_device()->set_kind(v1::CPU);
    return core_->RegisterWorker(req)->worker_id();
  }
  v1::Job WaitTerminal(const std::string& id) {
    for (int i = 0; i < 500; ++i) {
      core_->Tick();
      v1::Job job = *core_->GetJob(id);
      if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED || job.state() == v1::CANCELLED) {
        return job;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "job never ended";
    return *core_->GetJob(id);
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
  absl::Duration starvation_timeout_ = absl::Minutes(5);
  std::unique_ptr<Coordinator> core_;
};

TEST_F(CoordinatorTest, InvalidSpecIsRejectedBeforeQueueing) {
  Make();
  v1::JobSpec bad = TinyJobSpec(2, 5);
  bad.set_steps(0);
  auto job = core_->SubmitJob(bad);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->ListJobs({})->jobs.empty());
}

TEST_F(CoordinatorTest, UnknownJobsAreNotFoundAndTerminalCancelIsRefused) {
  Make();
  EXPECT_EQ(core_->GetJob("job-9").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->CancelJob("job-9", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->JobEvents("job-9").status().code(), absl::StatusCode::kNotFound);
  v1::Job job = *core_->SubmitJob(TinyJobSpec(1, 3));
  ASSERT_TRUE(core_->CancelJob(job.id(), "no longer needed").ok());
  v1::Job cancelled = *core_->GetJob(job.id());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_NE(cancelled.reason().find("no longer needed"), std::string::npos);
  EXPECT_EQ(core_->CancelJob(job.id(), "").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, RunsAGangAndReleasesIt) {
  Make();
  AddWorker("h:1");
  v1::Job job = *core_->SubmitJob(TinyJobSpec(2, 5));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(job.id())->state(), v1::PENDING);
  EXPECT_NE(core_->GetJob(job.id())->reason().find("1 registered"), std::string::npos);
  AddWorker("h:2");
  v1::Job done = WaitTerminal(job.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.steps_done(), 5);
  EXPECT_EQ(done.worker_ids_size(), 2);
  for (const v1::WorkerRecord& w : core_->ListWorkers()) EXPECT_TRUE(w.job_id().empty());
}

TEST_F(CoordinatorTest, StepMetricsCarryMfuOnlyWhenEveryDevicePeakIsKnown) {
  Make();
  for (const char* address : {"h:1", "h:2"}) {
    v1::RegisterWorkerRequest req;
    req.set_address(address);
    req.mutable_device()->set_kind(v1::CUDA);
    req.mutable_device()->set_name("NVIDIA H100 80GB HBM3");
    ASSERT_TRUE(core_->RegisterWorker(req).ok());
  }
  v1::JobSpec gpu = TinyJobSpec(2, 3);
  gpu.set_device_kind(v1::CUDA);
  gpu.mutable_model()->set_d_model(128);  // head dim 64, as CUDA jobs need
  v1::Job job = *core_->SubmitJob(gpu);
  v1::Job done = WaitTerminal(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  const v1::StepMetrics& m = done.last_metrics();
  ASSERT_GT(m.tokens_per_s(), 0.0);
  EXPECT_DOUBLE_EQ(m.mfu(),
                   m.tokens_per_s() * TrainingFlopsPerToken(gpu.model()) / (2 * 989e12));

  // CPU workers have no peak: no MFU.
  AddWorker("h:3");
  AddWorker("h:4");
  v1::Job cpu = WaitTerminal(core_->SubmitJob(TinyJobSpec(2, 3))->id());
  ASSERT_EQ(cpu.state(), v1::SUCCEEDED) << cpu.reason();
  EXPECT_GT(cpu.last_metrics().tokens_per_s(), 0.0);
  EXPECT_EQ(cpu.last_metrics().mfu(), 0.0);
}

TEST_F(CoordinatorTest, LostWorkerFailsItsJob) {
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;
  Make(stuck);
  std::string a = AddWorker("h:1");
  AddWorker("h:2");
  v1::Job job = *core_->SubmitJob(TinyJobSpec(2, 5));
  core_->Tick();
  absl::SleepFor(absl::Milliseconds(50));
  now_ += absl::Seconds(3);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_healthy(true);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  now_ += absl::Seconds(3);  // the second worker has been silent for 6 s
  v1::Job ended = WaitTerminal(job.id());
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_NE(ended.reason().find("no heartbeat"), std::string::npos) << ended.reason();
  EXPECT_EQ(core_->ListWorkers().size(), 1u);
  EXPECT_EQ(core_->WorkerLosses(), 1);
}

TEST_F(CoordinatorTest, JobRecordsSurviveARestart) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/state");
  Make({}, dir);
  v1::Job pending = *core_->SubmitJob(TinyJobSpec(4, 5));
  v1::Job cancelled = *core_->SubmitJob(TinyJobSpec(1, 5));
  ASSERT_TRUE(core_->CancelJob(cancelled.id(), "x").ok());
  core_->Shutdown();
  Make({}, dir);
  std::vector<v1::Job> jobs = core_->ListJobs({})->jobs;
  ASSERT_EQ(jobs.size(), 2u);
  v1::Job p = *core_->GetJob(pending.id());
  // Shutdown cancelled the queued job; it is terminal after the restart.
  EXPECT_TRUE(p.state() == v1::CANCELLED || p.state() == v1::FAILED);
  EXPECT_EQ(core_->GetJob(cancelled.id())->state(), v1::CANCELLED);
  v1::Job next = *core_->SubmitJob(TinyJobSpec(1, 1));
  EXPECT_NE(next.id(), pending.id());
  EXPECT_NE(next.id(), cancelled.id());
}

TEST_F(CoordinatorTest, HugeStepCountsAreRefusedAtSubmit) {
  // steps = 2^31-1 was once accepted and then aborted the coordinator.
  Make();
  auto job = core_->SubmitJob(TinyJobSpec(1, 2147483647));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "steps: must be <= 10000000 (got 2147483647)");
  EXPECT_TRUE(core_->ListJobs({})->jobs.empty());
}

TEST_F(CoordinatorTest, OversizedRequestStringsAreRefusedWithoutEchoingThem) {
  Make();
  const std::string huge(10 << 20, 'x');
  v1::JobSpec named = TinyJobSpec(1, 1);
  named.set_name(huge);
  EXPECT_EQ(core_->SubmitJob(named).status().message(),
            "name: must be at most 256 bytes (got 10485760)");
  for (const absl::Status& s :
       {core_->GetJob(huge).status(), core_->CancelJob(huge, "").status(),
        core_->DeleteJob(huge), core_->JobEvents(huge).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "job_id: must be at most 128 bytes (got 10485760)");
  }
  v1::Job job = *core_->SubmitJob(TinyJobSpec(1, 1));
  EXPECT_EQ(core_->CancelJob(job.id(), huge).status().message(),
            "reason: must be at most 1024 bytes (got 10485760)");
  v1::RegisterWorkerRequest worker;
  worker.set_address("h:1");
  worker.mutable_device()->set_kind(v1::CPU);
  worker.mutable_device()->set_name(huge);
  EXPECT_EQ(core_->RegisterWorker(worker).status().message(),
            "device.name: must be at most 256 bytes (got 10485760)");
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id("w-1");
  heartbeat.set_health_reason(huge);
  EXPECT_EQ(core_->Heartbeat(heartbeat).status().message(),
            "health_reason: must be at most 1024 bytes (got 10485760)");
  EXPECT_EQ(core_->rendezvous().Set(huge, "k", "v").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, StoredReasonsAreBounded) {
  FakeWorkerBehavior failing;
  failing.fail_setup = true;
  Make(failing);
  AddWorker("h:1");
  v1::Job job = *core_->SubmitJob(TinyJobSpec(1, 3));
  v1::Job ended = WaitTerminal(job.id());
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_LE(ended.reason().size(), 4096u);
  EXPECT_NE(ended.reason().find("RESOURCE_EXHAUSTED"), std::string::npos) << ended.reason();
}

// Follows every page; checks that no job repeats.
std::vector<v1::Job> AllPages(Coordinator& core, const std::vector<v1::JobState>& states,
                              int page_size, int* pages) {
  std::vector<v1::Job> all;
  std::set<std::string> seen;
  std::string token;
  *pages = 0;
  do {
    absl::StatusOr<Coordinator::JobPage> page = core.ListJobs(states, page_size, token);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    ++*pages;
    for (const v1::Job& j : page->jobs) {
      EXPECT_TRUE(seen.insert(j.id()).second) << "repeated " << j.id();
      all.push_back(j);
    }
    token = page->next_page_token;
  } while (!token.empty() && *pages < 1000);
  return all;
}

TEST_F(CoordinatorTest, ListJobsPagesNewestFirstWithoutRepeatsOrGaps) {
  Make();
  std::vector<std::string> ids;
  for (int i = 0; i < 250; ++i) {
    now_ += absl::Milliseconds(i % 3 == 0 ? 1 : 0);  // some jobs share a creation time
    ids.push_back(core_->SubmitJob(TinyJobSpec(1, 1))->id());
  }
  for (int i = 0; i < 250; i += 5) ASSERT_TRUE(core_->CancelJob(ids[i], "").ok());

  int pages = 0;
  std::vector<v1::Job> all = AllPages(*core_, {}, 0, &pages);
  EXPECT_EQ(pages, 3);  // the default page size is 100
  ASSERT_EQ(all.size(), 250u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].id(), ids[249 - i]);

  std::vector<v1::Job> pending = AllPages(*core_, {v1::PENDING}, 7, &pages);
  EXPECT_EQ(pending.size(), 200u);
  EXPECT_EQ(pages, 29);  // ceil(200 / 7)
  for (const v1::Job& j : pending) EXPECT_EQ(j.state(), v1::PENDING);

  // The first page of 1 job, then a job submitted meanwhile: the next page
  // continues where the first ended.
  auto first = core_->ListJobs({}, 1, "");
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->jobs.size(), 1u);
  now_ += absl::Seconds(1);
  core_->SubmitJob(TinyJobSpec(1, 1)).IgnoreError();
  auto second = core_->ListJobs({}, 1, first->next_page_token);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->jobs.size(), 1u);
  EXPECT_EQ(second->jobs[0].id(), ids[248]);

  // A page size above the maximum is capped, not refused.
  auto capped = core_->ListJobs({}, 100000, "");
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->jobs.size(), 251u);
  EXPECT_TRUE(capped->next_page_token.empty());
}

TEST_F(CoordinatorTest, ListJobsRefusesBadPageRequests) {
  Make();
  for (int i = 0; i < 3; ++i) core_->SubmitJob(TinyJobSpec(1, 1)).IgnoreError();
  auto page = core_->ListJobs({}, 1, "");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(core_->ListJobs({}, -1, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ListJobs({}, 1, "garbage").status().code(), absl::StatusCode::kInvalidArgument);
  // A token belongs to the filter it was made for.
  EXPECT_EQ(core_->ListJobs({v1::PENDING}, 1, page->next_page_token).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, ListJobsPagesStayUnderTheByteBudget) {
  // Jobs of about 8 KB each: 300 of them would not fit one 4 MB message.
  Make();
  for (int i = 0; i < 300; ++i) {
    v1::JobSpec spec = TinyJobSpec(1, 1);
    spec.mutable_data()->set_token_file("/" + std::string(4095, 'f'));
    spec.mutable_checkpoint()->set_dir("/" + std::string(4095, 'd'));
    ASSERT_TRUE(core_->SubmitJob(spec).ok());
  }
  int pages = 0;
  std::string token;
  size_t total = 0;
  do {
    auto page = core_->ListJobs({}, 1000, token);
    ASSERT_TRUE(page.ok()) << page.status();
    v1::ListJobsResponse response;
    for (const v1::Job& j : page->jobs) *response.add_jobs() = j;
    EXPECT_LE(response.ByteSizeLong(), static_cast<size_t>(2 << 20));
    EXPECT_FALSE(page->jobs.empty());
    total += page->jobs.size();
    token = page->next_page_token;
    ++pages;
  } while (!token.empty() && pages < 100);
  EXPECT_EQ(total, 300u);
  EXPECT_EQ(pages, 2);
}

TEST_F(CoordinatorTest, DeleteOnlyFinishedJobsAndNeverReuseTheirIds) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/delete-state");
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;
  Make(stuck, dir);
  EXPECT_EQ(core_->DeleteJob("job-404").code(), absl::StatusCode::kNotFound);

  v1::Job pending = *core_->SubmitJob(TinyJobSpec(2, 5));
  absl::Status s = core_->DeleteJob(pending.id());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("PENDING"), std::string::npos) << s;

  AddWorker("h:1");
  AddWorker("h:2");
  for (int i = 0; i < 200 && core_->GetJob(pending.id())->state() != v1::RUNNING; ++i) {
    core_->Tick();
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(core_->GetJob(pending.id())->state(), v1::RUNNING);
  EXPECT_EQ(core_->DeleteJob(pending.id()).code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(core_->CancelJob(pending.id(), "").ok());
  EXPECT_EQ(WaitTerminal(pending.id()).state(), v1::CANCELLED);
  ASSERT_TRUE(core_->DeleteJob(pending.id()).ok());
  EXPECT_EQ(core_->GetJob(pending.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->DeleteJob(pending.id()).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->ListJobs({})->jobs.empty());

  // After a restart the deleted job stays gone and its id is not handed out.
  core_->Shutdown();
  Make({}, dir);
  EXPECT_EQ(core_->GetJob(pending.id()).status().code(), absl::StatusCode::kNotFound);
  v1::Job next = *core_->SubmitJob(TinyJobSpec(1, 1));
  EXPECT_NE(next.id(), pending.id());
}

TEST_F(CoordinatorTest, AnImpossibleJobDoesNotBlockTheJobsBehindIt) {
  starvation_timeout_ = absl::ZeroDuration();  // a job that could run would hold the workers
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  v1::Job huge = *core_->SubmitJob(TinyJobSpec(1000, 5));
  v1::Job small = *core_->SubmitJob(TinyJobSpec(1, 3));
  v1::Job done = WaitTerminal(small.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  v1::Job waiting = *core_->GetJob(huge.id());
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_EQ(waiting.queue_position(), 1);
  EXPECT_NE(waiting.reason().find("waiting for 1000 healthy CPU workers to register: 2 registered"),
            std::string::npos)
      << waiting.reason();
}

TEST_F(CoordinatorTest, OversizedRecordsFromBeforeTheLimitsAreCutOnLoad) {
  // A state directory holding a job accepted with a 10 MB name once made
  // every ListJobs fail; after a restart it must list again.
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/old-state");
  Make({}, dir);
  core_->Shutdown();
  v1::Job old;
  old.set_id("job-7");
  old.set_state(v1::SUCCEEDED);
  old.set_reason(std::string(10 << 20, 'r'));
  *old.mutable_spec() = TinyJobSpec(1, 1);
  old.mutable_spec()->set_name(std::string(10 << 20, '7'));
  {
    // As a release before the job store kept it: one file per job.
    mkdir((dir + "/jobs").c_str(), 0755);
    std::ofstream out(dir + "/jobs/job-7.binpb", std::ios::binary);
    ASSERT_TRUE(old.SerializeToOstream(&out));
  }
  Make({}, dir);
  auto page = core_->ListJobs({});
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_LE(page->jobs[0].spec().name().size(), 256u);
  EXPECT_LE(page->jobs[0].reason().size(), 4096u);
  EXPECT_NE(page->jobs[0].spec().name().find("[truncated]"), std::string::npos);
  EXPECT_EQ(core_->SubmitJob(TinyJobSpec(1, 1))->id(), "job-8");
  // The cut record moved into the job store; the old file is gone.
  core_->Shutdown();
  EXPECT_FALSE(std::ifstream(dir + "/jobs/job-7.binpb").good());
  Make({}, dir);
  absl::StatusOr<v1::Job> reread = core_->GetJob("job-7");
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_LE(reread->spec().name().size(), 256u);
  EXPECT_EQ(core_->SubmitJob(TinyJobSpec(1, 1))->id(), "job-9");
}

std::vector<v1::JobEvent> Events(Coordinator& core, const std::string& id) {
  std::shared_ptr<EventLog> log = *core.JobEvents(id);
  return log->Read(0, 0, absl::ZeroDuration()).events;
}

std::string CheckpointRoot(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST_F(CoordinatorTest, ARetryableFailureRestartsFromTheCommittedCheckpointAndSucceeds) {
  FakeWorkerBehavior failing;
  failing.fail_at_step = 7;  // after the checkpoint of step 6
  MakeWith([failing](int n) { return n < 2 ? failing : FakeWorkerBehavior(); });
  AddWorker("h:1");
  AddWorker("h:2");
  v1::JobSpec spec = TinyJobSpec(2, 10);
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(CheckpointRoot("restart-ckpt"));
  spec.mutable_checkpoint()->set_interval_steps(3);
  v1::Job done = WaitTerminal(core_->SubmitJob(spec)->id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_EQ(done.committed_step(), 10);
  EXPECT_EQ(done.steps_done(), 10);

  std::vector<std::string> transitions;
  std::map<int, int> latest_attempt;  // step -> highest attempt that reported it
  std::map<int, int> records;
  std::vector<int> checkpoints;  // CheckpointCommitted events, in order
  for (const v1::JobEvent& e : Events(*core_, done.id())) {
    if (e.has_checkpoint()) {
      checkpoints.push_back(e.checkpoint().step());
      EXPECT_GE(e.checkpoint().write_s(), 0.0);
    }
    if (e.has_state_change()) {
      transitions.push_back(absl::StrCat(v1::JobState_Name(e.state_change().state()), ": ",
                                         e.state_change().reason()));
    }
    if (e.has_step()) {
      ++records[e.step().step()];
      latest_attempt[e.step().step()] =
          std::max(latest_attempt[e.step().step()], e.step().attempt());
    }
  }
  ASSERT_EQ(transitions.size(), 7u) << absl::StrJoin(transitions, "\n");
  // Attempt 0 committed steps 3 and 6; attempt 1 resumed at 6 and committed
  // 9 and 10 (the final step).
  EXPECT_EQ(checkpoints, (std::vector<int>{3, 6, 9, 10}));
  EXPECT_EQ(transitions[3].rfind("RESTARTING: restart 1 of 1 after: RunSteps failed", 0), 0u)
      << transitions[3];
  EXPECT_NE(transitions[3].find("will resume from checkpoint step 6"), std::string::npos);
  EXPECT_EQ(transitions[4], "STARTING: attempt 2: setting up shards on 2 workers, resuming from step 6");
  EXPECT_EQ(transitions[5].rfind("RUNNING", 0), 0u);
  EXPECT_EQ(transitions[6].rfind("SUCCEEDED", 0), 0u);
  // Attempt 0 ran steps 0-5, then step 6 on a rank that failed in step 7
  // (the other rank's step 6 may have been cut short by the stop); attempt 1
  // resumed from the checkpoint of step 6 and reported steps 6-9. Step 6 may
  // therefore have a record of each attempt; keeping the latest attempt per
  // step leaves each step exactly once.
  ASSERT_EQ(latest_attempt.size(), 10u);
  for (int step = 0; step < 10; ++step) {
    EXPECT_EQ(latest_attempt[step], step >= 6 ? 1 : 0) << step;
    if (step == 6) {
      EXPECT_GE(records[step], 1);
      EXPECT_LE(records[step], 2);
    } else {
      EXPECT_EQ(records[step], 1) << step;
    }
  }
}

TEST_F(CoordinatorTest, ASpentBudgetFailsWithRestartsExhausted) {
  FakeWorkerBehavior failing;
  failing.fail_at_step = 2;
  Make(failing);
  AddWorker("h:1");
  AddWorker("h:2");
  v1::JobSpec spec = TinyJobSpec(2, 5);
  spec.set_max_restarts(2);
  v1::Job done = WaitTerminal(core_->SubmitJob(spec)->id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.restarts(), 2);
  EXPECT_NE(done.reason().find("restarts exhausted (2 of 2 used)"), std::string::npos)
      << done.reason();
  int restarting = 0;
  for (const v1::JobEvent& e : Events(*core_, done.id())) {
    if (e.has_state_change() && e.state_change().state() == v1::RESTARTING) {
      ++restarting;
      // No checkpoint directory: every attempt starts over, and says so.
      EXPECT_NE(e.state_change().reason().find("start again from step 0"), std::string::npos);
    }
  }
  EXPECT_EQ(restarting, 2);
  for (const v1::WorkerRecord& w : core_->ListWorkers()) EXPECT_TRUE(w.job_id().empty());
}

TEST_F(CoordinatorTest, ANonRetryableFailureFailsAtOnceWhateverTheBudget) {
  FakeWorkerBehavior oom;
  oom.fail_setup = true;  // RESOURCE_EXHAUSTED
  Make(oom);
  AddWorker("h:1");
  v1::JobSpec spec = TinyJobSpec(1, 5);
  spec.set_max_restarts(3);
  v1::Job done = WaitTerminal(core_->SubmitJob(spec)->id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_NE(done.reason().find("RESOURCE_EXHAUSTED"), std::string::npos) << done.reason();
}

TEST_F(CoordinatorTest, UnreachableWorkersAreDroppedAndARestartingJobWaitsAndCanBeCancelled) {
  FakeWorkerBehavior dead;
  dead.fail_at_step = 1;
  dead.abort_code = absl::StatusCode::kUnavailable;  // nobody listening any more
  Make(dead);
  AddWorker("h:1");
  v1::JobSpec spec = TinyJobSpec(1, 5);
  spec.set_max_restarts(1);
  v1::Job job = *core_->SubmitJob(spec);
  v1::Job waiting;
  for (int i = 0; i < 500 && waiting.state() != v1::RESTARTING; ++i) {
    core_->Tick();
    waiting = *core_->GetJob(job.id());
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(waiting.state(), v1::RESTARTING) << waiting.reason();
  EXPECT_EQ(waiting.restarts(), 1);
  EXPECT_TRUE(core_->ListWorkers().empty());  // never placed on again
  EXPECT_NE(waiting.reason().find("waiting for 1 healthy CPU workers"), std::string::npos)
      << waiting.reason();
  ASSERT_TRUE(core_->CancelJob(job.id(), "not worth it").ok());
  v1::Job ended = *core_->GetJob(job.id());
  EXPECT_EQ(ended.state(), v1::CANCELLED);
  AddWorker("h:2");
  core_->Tick();
  EXPECT_EQ(core_->GetJob(job.id())->state(), v1::CANCELLED);
}

TEST_F(CoordinatorTest, AWorkerWhoseAbortWasNotAcknowledgedIsNotReusedUntilItReportsIdle) {
  // The SIGSTOP case: the survivor's Abort timed out while its collective
  // still waited on the stopped peer; placing a job on it would fail "busy".
  FakeWorkerBehavior stuck;
  stuck.fail_at_step = 1;
  stuck.abort_code = absl::StatusCode::kDeadlineExceeded;
  MakeWith([stuck](int n) { return n == 0 ? stuck : FakeWorkerBehavior(); });
  std::string w = AddWorker("h:1");
  v1::Job failed = WaitTerminal(core_->SubmitJob(TinyJobSpec(1, 5))->id());
  ASSERT_EQ(failed.state(), v1::FAILED);
  v1::Job next = *core_->SubmitJob(TinyJobSpec(1, 2));
  for (int i = 0; i < 5; ++i) core_->Tick();
  EXPECT_EQ(core_->GetJob(next.id())->state(), v1::PENDING);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  hb.set_healthy(true);
  hb.mutable_activity()->set_job_id(failed.id());
  hb.mutable_activity()->set_phase("running");
  absl::StatusOr<v1::HeartbeatResponse> told = core_->Heartbeat(hb);
  ASSERT_TRUE(told.ok());
  ASSERT_EQ(told->abort_job_ids_size(), 1);
  EXPECT_EQ(told->abort_job_ids(0), failed.id());
  hb.clear_activity();  // it aborted
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(WaitTerminal(next.id()).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, AWorkerRegisteringWithAJobTheCoordinatorDoesNotKnowIsToldToAbortIt) {
  // After SIGCONT (swept meanwhile) or after a coordinator restart.
  Make();
  v1::RegisterWorkerRequest req;
  req.set_address("h:1");
  req.mutable_device()->set_kind(v1::CPU);
  req.mutable_activity()->set_job_id("job-1");
  req.mutable_activity()->set_phase("running");
  req.mutable_activity()->set_steps_done(4);
  absl::StatusOr<v1::RegisterWorkerResponse> resp = core_->RegisterWorker(req);
  ASSERT_TRUE(resp.ok());
  ASSERT_EQ(resp->abort_job_ids_size(), 1);
  EXPECT_EQ(resp->abort_job_ids(0), "job-1");
  v1::Job job = *core_->SubmitJob(TinyJobSpec(1, 2));
  for (int i = 0; i < 5; ++i) core_->Tick();
  EXPECT_EQ(core_->GetJob(job.id())->state(), v1::PENDING);
  ASSERT_EQ(core_->ListWorkers().size(), 1u);
  EXPECT_EQ(core_->ListWorkers()[0].activity().steps_done(), 4);

  v1::HeartbeatRequest idle;
  idle.set_worker_id(resp->worker_id());
  idle.set_healthy(true);
  absl::StatusOr<v1::HeartbeatResponse> told = core_->Heartbeat(idle);
  ASSERT_TRUE(told.ok());
  EXPECT_EQ(told->abort_job_ids_size(), 0);
  EXPECT_EQ(WaitTerminal(job.id()).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, ReportedActivityIsBounded) {
  Make();
  v1::RegisterWorkerRequest req;
  req.set_address("h:1");
  req.mutable_device()->set_kind(v1::CPU);
  req.mutable_activity()->set_phase(std::string(1000, 'p'));
  EXPECT_EQ(core_->RegisterWorker(req).status().message(),
            "activity.phase: must be at most 64 bytes (got 1000)");
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w-1");
  hb.mutable_activity()->set_job_id(std::string(1000, 'j'));
  EXPECT_EQ(core_->Heartbeat(hb).status().message(),
            "activity.job_id: must be at most 128 bytes (got 1000)");
}

TEST_F(CoordinatorTest, TheStepWatchdogRestartsAJobWhoseBudgetAllows) {
  FakeWorkerBehavior stuck;
  stuck.hang_in_run = true;  // a deadlocked compute thread; heartbeats go on
  MakeWith([stuck](int n) { return n == 0 ? stuck : FakeWorkerBehavior(); });
  AddWorker("h:1");
  v1::JobSpec spec = TinyJobSpec(1, 4);
  spec.set_step_timeout_s(1);
  spec.set_max_restarts(1);
  v1::Job done = WaitTerminal(core_->SubmitJob(spec)->id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.restarts(), 1);
  bool saw = false;
  for (const v1::JobEvent& e : Events(*core_, done.id())) {
    if (e.has_state_change() && e.state_change().state() == v1::RESTARTING) {
      EXPECT_NE(e.state_change().reason().find("step watchdog"), std::string::npos);
      saw = true;
    }
  }
  EXPECT_TRUE(saw);
}

TEST_F(CoordinatorTest, AJobPlacedOnAWorkerThatJustDiedIsPlacedElsewhereWithoutARestart) {
  // The worker died before its heartbeats timed out: still registered, it
  // was placed on, refused SetupJob, and must not fail the job.
  FakeWorkerBehavior dead;
  dead.unreachable = true;
  MakeWith([dead](int n) { return n == 0 ? dead : FakeWorkerBehavior(); });
  std::string gone = AddWorker("h:1");
  std::string alive = AddWorker("h:2");
  v1::Job done = WaitTerminal(core_->SubmitJob(TinyJobSpec(1, 3))->id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.restarts(), 0);
  ASSERT_EQ(done.worker_ids_size(), 1);
  EXPECT_EQ(done.worker_ids(0), alive);
  ASSERT_EQ(core_->ListWorkers().size(), 1u);
  EXPECT_EQ(core_->ListWorkers()[0].worker_id(), alive);
  bool saw = false;
  for (const v1::JobEvent& e : Events(*core_, done.id())) {
    if (e.has_state_change() && e.state_change().state() == v1::RESTARTING) {
      EXPECT_NE(e.state_change().reason().find("not counted as a restart"), std::string::npos);
      saw = true;
    }
  }
  EXPECT_TRUE(saw);
}

TEST_F(CoordinatorTest, PlacingAgainIsBounded) {
  FakeWorkerBehavior dead;
  dead.unreachable = true;
  Make(dead);
  v1::Job job = *core_->SubmitJob(TinyJobSpec(1, 3));
  for (int i = 0; i < 6; ++i) {
    AddWorker(absl::StrCat("h:", i));  // each one dies as soon as it is used
    for (int t = 0; t < 50 && core_->GetJob(job.id())->state() != v1::FAILED; ++t) {
      core_->Tick();
      if (core_->GetJob(job.id())->state() == v1::RESTARTING) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  v1::Job ended = WaitTerminal(job.id());
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_NE(ended.reason().find("UNAVAILABLE"), std::string::npos) << ended.reason();
}

// What a coordinator killed mid-run leaves in its store: a RUNNING record
// with its history. Written through the store itself, as kill -9 cannot be
// simulated in-process.
void LeaveARunningJob(const std::string& dir, const v1::JobSpec& spec, int committed_step) {
  auto store = JobStore::Open(dir + "/coordinator.db");
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  job.set_id("job-4");
  *job.mutable_spec() = WithDefaults(spec);
  job.set_state(v1::RUNNING);
  job.set_steps_done(committed_step + 1);
  job.set_committed_step(committed_step);
  job.add_worker_ids("w-1");
  int64_t sequence = 0;
  for (v1::JobState state : {v1::PENDING, v1::STARTING, v1::RUNNING}) {
    v1::JobEvent e;
    e.set_sequence(++sequence);
    e.mutable_state_change()->set_state(state);
    e.mutable_state_change()->set_reason("before the crash");
    ASSERT_TRUE((*store)->PutJobWithEvent(job, e).ok());
  }
  for (int step = 0; step <= committed_step; ++step) {
    v1::JobEvent e;
    e.set_sequence(++sequence);
    e.mutable_step()->set_step(step);
    ASSERT_TRUE((*store)->AppendEvent(job.id(), e).ok());
  }
}

TEST_F(CoordinatorTest, AJobRunningWhenTheCoordinatorDiedResumesFromItsCheckpointWithItsHistory) {
  const std::string dir = CheckpointRoot("crashed-state");
  v1::JobSpec spec = TinyJobSpec(1, 10);
  spec.mutable_checkpoint()->set_dir(CheckpointRoot("crashed-ckpt"));
  spec.mutable_checkpoint()->set_interval_steps(5);
  // The checkpoint of step 5 was committed before the crash.
  {
    FakeWorkerConnection writer(0, {});
    v1::CheckpointRequest request;
    request.set_dir(spec.checkpoint().dir());
    request.set_step(5);
    ASSERT_TRUE(writer.Checkpoint(request).ok());
    ASSERT_TRUE(CommitStep(spec.checkpoint().dir(), 5, 1).ok());
  }
  mkdir(dir.c_str(), 0755);
  LeaveARunningJob(dir, spec, 5);
  Make({}, dir);
  v1::Job reloaded = *core_->GetJob("job-4");
  EXPECT_EQ(reloaded.state(), v1::RESTARTING);
  EXPECT_NE(reloaded.reason().find("will resume from checkpoint step 5 (not counted as a restart)"),
            std::string::npos)
      << reloaded.reason();
  AddWorker("h:1");
  v1::Job done = WaitTerminal("job-4");
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.restarts(), 0);
  std::vector<int> steps;
  std::vector<int64_t> sequences;
  for (const v1::JobEvent& e : Events(*core_, "job-4")) {
    sequences.push_back(e.sequence());
    if (e.has_step()) steps.push_back(e.step().step());
  }
  // The history before the crash, then steps 5-9 of the resumed run.
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9}));
  for (size_t i = 0; i < sequences.size(); ++i) EXPECT_EQ(sequences[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(core_->SubmitJob(TinyJobSpec(1, 1))->id(), "job-5");

  // And it all survives another restart.
  core_->Shutdown();
  Make({}, dir);
  EXPECT_EQ(Events(*core_, "job-4").size(), sequences.size());
  EXPECT_EQ(core_->GetJob("job-4")->state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, AJobRunningWithoutACheckpointWhenTheCoordinatorDiedFailsSayingSo) {
  const std::string dir = CheckpointRoot("crashed-no-ckpt");
  mkdir(dir.c_str(), 0755);
  LeaveARunningJob(dir, TinyJobSpec(1, 10), 0);
  Make({}, dir);
  v1::Job job = *core_->GetJob("job-4");
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.reason().find("committed no checkpoint"), std::string::npos) << job.reason();
}

TEST_F(CoordinatorTest, AQueuedJobIsStillQueuedAfterACoordinatorRestart) {
  const std::string dir = CheckpointRoot("queued-state");
  mkdir(dir.c_str(), 0755);
  {
    auto store = JobStore::Open(dir + "/coordinator.db");
    ASSERT_TRUE(store.ok());
    v1::Job job;
    job.set_id("job-2");
    *job.mutable_spec() = WithDefaults(TinyJobSpec(1, 3));
    job.set_state(v1::PENDING);
    v1::JobEvent e;
    e.set_sequence(1);
    e.mutable_state_change()->set_state(v1::PENDING);
    ASSERT_TRUE((*store)->PutJobWithEvent(job, e).ok());
  }
  Make({}, dir);
  EXPECT_EQ(core_->GetJob("job-2")->state(), v1::PENDING);
  AddWorker("h:1");
  EXPECT_EQ(WaitTerminal("job-2").state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, AStateDirectoryWhoseStoreIsDamagedIsRefusedNamingIt) {
  const std::string dir = CheckpointRoot("damaged-state");
  mkdir(dir.c_str(), 0755);
  {
    std::ofstream out(dir + "/coordinator.db", std::ios::binary);
    out << std::string(8192, 'z');
  }
  CoordinatorOptions options;
  options.state_dir = dir;
  options.start_background_thread = false;
  Coordinator core(options);
  absl::Status s = core.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("state_dir: "), std::string::npos) << s;
  EXPECT_NE(s.message().find(dir + "/coordinator.db"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera

// The coordinator core without a server: validation before queueing (also
// of the sizes that once broke it), NOT_FOUND, cancel semantics, scheduling
// a gang, a lost worker failing its job, job records surviving a restart
// through the state directory, bounded request strings and stored reasons,
// ListJobs pages, deleting finished jobs, backfill past a job that cannot
// be placed, and MFU in the step metrics.
#include "server/coordinator.h"

#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/fake_worker_connection.h"
#include "server/model_flops.h"

namespace tessera {
namespace {

v1::JobSpec Spec(int world, int steps) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_ffn_dim(64);
  m->set_seq_len(16);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(world);
  spec.set_steps(steps);
  return spec;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void Make(FakeWorkerBehavior behavior = {}, std::string state_dir = "") {
    CoordinatorOptions options;
    options.state_dir = state_dir;
    options.start_background_thread = false;
    options.worker_timeout = absl::Seconds(5);
    options.starvation_timeout = starvation_timeout_;
    options.now = [this] { return now_; };
    options.connect = [behavior](const std::string&) {
      return std::make_unique<FakeWorkerConnection>(0, behavior);
    };
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
  v1::JobSpec bad = Spec(2, 5);
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
  v1::Job job = *core_->SubmitJob(Spec(1, 3));
  ASSERT_TRUE(core_->CancelJob(job.id(), "no longer needed").ok());
  v1::Job cancelled = *core_->GetJob(job.id());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_NE(cancelled.reason().find("no longer needed"), std::string::npos);
  EXPECT_EQ(core_->CancelJob(job.id(), "").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, RunsAGangAndReleasesIt) {
  Make();
  AddWorker("h:1");
  v1::Job job = *core_->SubmitJob(Spec(2, 5));
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
  v1::JobSpec gpu = Spec(2, 3);
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
  v1::Job cpu = WaitTerminal(core_->SubmitJob(Spec(2, 3))->id());
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
  v1::Job job = *core_->SubmitJob(Spec(2, 5));
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
}

TEST_F(CoordinatorTest, JobRecordsSurviveARestart) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/state");
  Make({}, dir);
  v1::Job pending = *core_->SubmitJob(Spec(4, 5));
  v1::Job cancelled = *core_->SubmitJob(Spec(1, 5));
  ASSERT_TRUE(core_->CancelJob(cancelled.id(), "x").ok());
  core_->Shutdown();
  Make({}, dir);
  std::vector<v1::Job> jobs = core_->ListJobs({})->jobs;
  ASSERT_EQ(jobs.size(), 2u);
  v1::Job p = *core_->GetJob(pending.id());
  // Shutdown cancelled the queued job; it is terminal after the restart.
  EXPECT_TRUE(p.state() == v1::CANCELLED || p.state() == v1::FAILED);
  EXPECT_EQ(core_->GetJob(cancelled.id())->state(), v1::CANCELLED);
  v1::Job next = *core_->SubmitJob(Spec(1, 1));
  EXPECT_NE(next.id(), pending.id());
  EXPECT_NE(next.id(), cancelled.id());
}

TEST_F(CoordinatorTest, HugeStepCountsAreRefusedAtSubmit) {
  // steps = 2^31-1 was once accepted and then aborted the coordinator.
  Make();
  auto job = core_->SubmitJob(Spec(1, 2147483647));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "steps: must be <= 10000000 (got 2147483647)");
  EXPECT_TRUE(core_->ListJobs({})->jobs.empty());
}

TEST_F(CoordinatorTest, OversizedRequestStringsAreRefusedWithoutEchoingThem) {
  Make();
  const std::string huge(10 << 20, 'x');
  v1::JobSpec named = Spec(1, 1);
  named.set_name(huge);
  EXPECT_EQ(core_->SubmitJob(named).status().message(),
            "name: must be at most 256 bytes (got 10485760)");
  for (const absl::Status& s :
       {core_->GetJob(huge).status(), core_->CancelJob(huge, "").status(),
        core_->DeleteJob(huge), core_->JobEvents(huge).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "job_id: must be at most 128 bytes (got 10485760)");
  }
  v1::Job job = *core_->SubmitJob(Spec(1, 1));
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
  EXPECT_EQ(core_->Heartbeat(heartbeat).message(),
            "health_reason: must be at most 1024 bytes (got 10485760)");
  EXPECT_EQ(core_->rendezvous().Set(huge, "k", "v").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, StoredReasonsAreBounded) {
  FakeWorkerBehavior failing;
  failing.fail_setup = true;
  Make(failing);
  AddWorker("h:1");
  v1::Job job = *core_->SubmitJob(Spec(1, 3));
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
    ids.push_back(core_->SubmitJob(Spec(1, 1))->id());
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
  core_->SubmitJob(Spec(1, 1)).IgnoreError();
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
  for (int i = 0; i < 3; ++i) core_->SubmitJob(Spec(1, 1)).IgnoreError();
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
    v1::JobSpec spec = Spec(1, 1);
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

  v1::Job pending = *core_->SubmitJob(Spec(2, 5));
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
  v1::Job next = *core_->SubmitJob(Spec(1, 1));
  EXPECT_NE(next.id(), pending.id());
}

TEST_F(CoordinatorTest, AnImpossibleJobDoesNotBlockTheJobsBehindIt) {
  starvation_timeout_ = absl::ZeroDuration();  // a job that could run would hold the workers
  Make();
  AddWorker("h:1");
  AddWorker("h:2");
  v1::Job huge = *core_->SubmitJob(Spec(1000, 5));
  v1::Job small = *core_->SubmitJob(Spec(1, 3));
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
  *old.mutable_spec() = Spec(1, 1);
  old.mutable_spec()->set_name(std::string(10 << 20, '7'));
  {
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
  EXPECT_EQ(core_->SubmitJob(Spec(1, 1))->id(), "job-8");
  // The cut record was written back.
  core_->Shutdown();
  std::ifstream in(dir + "/jobs/job-7.binpb", std::ios::binary);
  v1::Job reread;
  ASSERT_TRUE(reread.ParseFromIstream(&in));
  EXPECT_LE(reread.spec().name().size(), 256u);
}

}  // namespace
}  // namespace tessera

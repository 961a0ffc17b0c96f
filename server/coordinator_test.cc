// The coordinator core without a server: validation before queueing,
// NOT_FOUND, cancel semantics, scheduling a gang, a lost worker failing its
// job, and job records surviving a restart through the state directory.
#include "server/coordinator.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/fake_worker_connection.h"

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
  std::unique_ptr<Coordinator> core_;
};

TEST_F(CoordinatorTest, InvalidSpecIsRejectedBeforeQueueing) {
  Make();
  v1::JobSpec bad = Spec(2, 5);
  bad.set_steps(0);
  auto job = core_->SubmitJob(bad);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->ListJobs({}).empty());
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
  std::vector<v1::Job> jobs = core_->ListJobs({});
  ASSERT_EQ(jobs.size(), 2u);
  v1::Job p = *core_->GetJob(pending.id());
  // Shutdown cancelled the queued job; it is terminal after the restart.
  EXPECT_TRUE(p.state() == v1::CANCELLED || p.state() == v1::FAILED);
  EXPECT_EQ(core_->GetJob(cancelled.id())->state(), v1::CANCELLED);
  v1::Job next = *core_->SubmitJob(Spec(1, 1));
  EXPECT_NE(next.id(), pending.id());
  EXPECT_NE(next.id(), cancelled.id());
}

}  // namespace
}  // namespace tessera

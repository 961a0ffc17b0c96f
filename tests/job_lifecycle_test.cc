// End-to-end job lifecycle across real processes: a coordinator and two CPU
// worker daemons on loopback, driven through the raw v1 gRPC API exactly as
// an orchestration tool would. Covers submit + watch to completion (with a
// late subscriber replaying), cancel mid-run, a bad spec, a job that cannot
// be scheduled (and does not block a smaller one behind it), a worker
// killed mid-run, specs sized to abort a process (refused by the
// coordinator, and by a worker sent one directly), a checkpoint directory
// made at setup or refused there, and ListJobs pages with DeleteJob.
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::IsTerminal;
using testing::LocalCluster;

// A model small enough to run a step in a few milliseconds on one core.
v1::JobSpec TinyJob(int steps, int world_size = 2) {
  v1::JobSpec spec;
  spec.set_name("tiny");
  v1::ModelConfig* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_d_model(32);
  model->set_n_layers(1);
  model->set_n_heads(2);
  model->set_ffn_dim(64);
  model->set_seq_len(16);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(3e-3f);
  spec.mutable_optimizer()->set_warmup_steps(2);
  spec.set_world_size(world_size);
  spec.set_device_kind(v1::CPU);
  spec.set_steps(steps);
  spec.set_seed(7);
  return spec;
}

class JobLifecycleTest : public ::testing::Test {
 protected:
  void StartCluster(int workers, std::vector<std::string> flags = {}) {
    auto cluster = LocalCluster::Start(workers, flags);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    channel_ = grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Coordinator::NewStub(channel_);
  }

  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(10)) {
    return testing::ContextWithDeadline(timeout);
  }

  v1::Job Submit(const v1::JobSpec& spec) { return testing::SubmitOrFail(*stub_, spec); }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = stub_->GetJob(Context().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  // Reads the watch stream until it ends; returns every event.
  std::vector<v1::JobEvent> WatchAll(const std::string& id, int from_step,
                                     absl::Duration timeout = absl::Seconds(120)) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_from_step(from_step);
    auto ctx = Context(timeout);
    auto reader = stub_->WatchJob(ctx.get(), req);
    std::vector<v1::JobEvent> events;
    v1::JobEvent event;
    while (reader->Read(&event)) events.push_back(event);
    grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << cluster_->Logs();
    return events;
  }

  // Waits until `pred(job)` holds; fails the test on timeout.
  template <typename Pred>
  v1::Job WaitFor(const std::string& id, Pred pred, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    v1::Job job;
    while (absl::Now() < deadline) {
      job = Get(id);
      if (pred(job)) return job;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "timed out; last job state " << v1::JobState_Name(job.state()) << " reason '"
                  << job.reason() << "'\n"
                  << cluster_->Logs();
    return job;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(JobLifecycleTest, SubmitAndWatchToCompletionThenReplay) {
  StartCluster(2);
  constexpr int kSteps = 12;
  v1::Job job = Submit(TinyJob(kSteps));
  ASSERT_FALSE(job.id().empty());

  std::vector<v1::JobEvent> events = WatchAll(job.id(), 0);
  std::vector<int> steps;
  std::vector<v1::JobState> states;
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) {
      steps.push_back(e.step().step());
      EXPECT_GT(e.step().loss(), 0.f);
      EXPECT_GT(e.step().tokens_per_s(), 0.0);
      EXPECT_GT(e.step().tokens(), 0);
    }
    if (e.has_state_change()) states.push_back(e.state_change().state());
  }
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps)) << cluster_->Logs();
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(steps[i], i);
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back(), v1::SUCCEEDED);
  EXPECT_NE(std::find(states.begin(), states.end(), v1::RUNNING), states.end());

  v1::Job done = Get(job.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.steps_done(), kSteps);
  EXPECT_FALSE(done.reason().empty());

  // A late subscriber replays from step 8 and still sees the terminal state.
  std::vector<v1::JobEvent> replay = WatchAll(job.id(), 8);
  int replayed_steps = 0;
  for (const v1::JobEvent& e : replay) {
    if (e.has_step()) {
      EXPECT_GE(e.step().step(), 8);
      ++replayed_steps;
    }
  }
  EXPECT_EQ(replayed_steps, kSteps - 8);
  ASSERT_TRUE(replay.back().has_state_change());
  EXPECT_EQ(replay.back().state_change().state(), v1::SUCCEEDED);
}

TEST_F(JobLifecycleTest, CancelMidRunReleasesWorkers) {
  StartCluster(2);
  v1::Job job = Submit(TinyJob(1000000));
  WaitFor(job.id(), [](const v1::Job& j) { return j.steps_done() >= 2; }, absl::Seconds(60));

  v1::CancelJobRequest req;
  req.set_job_id(job.id());
  req.set_reason("operator asked");
  v1::Job cancelled;
  grpc::Status s = stub_->CancelJob(Context().get(), req, &cancelled);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::Job ended = WaitFor(job.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                          absl::Seconds(30));
  EXPECT_EQ(ended.state(), v1::CANCELLED);
  EXPECT_NE(ended.reason().find("operator asked"), std::string::npos) << ended.reason();

  // Cancelling again is refused: the job is already terminal.
  v1::Job again;
  grpc::Status s2 = stub_->CancelJob(Context().get(), req, &again);
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // The workers are free again: a new job runs to completion.
  v1::Job next = Submit(TinyJob(3));
  v1::Job next_done = WaitFor(next.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                              absl::Seconds(60));
  EXPECT_EQ(next_done.state(), v1::SUCCEEDED) << next_done.reason() << cluster_->Logs();
}

TEST_F(JobLifecycleTest, BadSpecIsRejectedBeforeScheduling) {
  StartCluster(2);
  v1::JobSpec spec = TinyJob(5);
  spec.mutable_model()->set_d_model(30);  // not divisible by 4 heads
  spec.mutable_model()->set_n_heads(4);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::Status s = stub_->SubmitJob(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("d_model"), std::string::npos) << s.error_message();

  v1::ListJobsRequest list_req;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list_req, &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);

  v1::GetJobRequest get;
  get.set_job_id("job-does-not-exist");
  v1::Job job;
  EXPECT_EQ(stub_->GetJob(Context().get(), get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(JobLifecycleTest, JobNeedingThreeWorkersStaysPending) {
  StartCluster(2);
  v1::Job job = Submit(TinyJob(5, /*world_size=*/3));
  absl::SleepFor(absl::Seconds(2));
  v1::Job pending = Get(job.id());
  EXPECT_EQ(pending.state(), v1::PENDING);
  EXPECT_NE(pending.reason().find("3"), std::string::npos) << pending.reason();
  EXPECT_EQ(pending.queue_position(), 1);

  v1::CancelJobRequest req;
  req.set_job_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), req, &cancelled).ok());
  v1::Job ended = WaitFor(job.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                          absl::Seconds(10));
  EXPECT_EQ(ended.state(), v1::CANCELLED);
}

TEST_F(JobLifecycleTest, KilledWorkerFailsItsJobWithoutHanging) {
  StartCluster(2, {"--worker_timeout_ms=2000", "--heartbeat_interval_ms=300",
                   "--collective_timeout_ms=5000"});
  v1::Job job = Submit(TinyJob(1000000));
  WaitFor(job.id(), [](const v1::Job& j) { return j.steps_done() >= 2; }, absl::Seconds(60));
  absl::Time killed_at = absl::Now();
  cluster_->worker(1).Kill();
  v1::Job ended = WaitFor(job.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                          absl::Seconds(30));
  EXPECT_EQ(ended.state(), v1::FAILED) << cluster_->Logs();
  EXPECT_FALSE(ended.reason().empty());
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(30));

  // The surviving worker is released and healthy.
  absl::SleepFor(absl::Seconds(3));
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(stub_->ListWorkers(Context().get(), req, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1) << workers.DebugString();
  EXPECT_TRUE(workers.workers(0).job_id().empty());
}

// checkpoint.dir is made, parents included, when the job is set up: a job
// whose directory's parents did not exist trains and commits its
// checkpoints, and one whose directory cannot be made fails at setup,
// naming it, without a step run or a restart spent.
TEST_F(JobLifecycleTest, CheckpointDirectoryIsMadeAtSetupOrTheJobFailsThere) {
  StartCluster(2);
  const std::string base = testing::MakeTempDir("ckpt-parents");
  v1::JobSpec spec = TinyJob(4);
  spec.mutable_checkpoint()->set_dir(base + "/runs/team/job");
  spec.mutable_checkpoint()->set_interval_steps(2);
  v1::Job made = Submit(spec);
  v1::Job done = WaitFor(made.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                         absl::Seconds(120));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  struct stat st;
  EXPECT_EQ(stat((base + "/runs/team/job/step-4/COMMITTED").c_str(), &st), 0);

  const std::string file = base + "/notes.txt";
  std::ofstream(file) << "a file, not a directory";
  spec.mutable_checkpoint()->set_dir(file + "/job");
  spec.set_steps(1000);
  spec.set_max_restarts(3);
  v1::Job refused = Submit(spec);
  v1::Job failed = WaitFor(refused.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                           absl::Seconds(60));
  EXPECT_EQ(failed.state(), v1::FAILED) << cluster_->Logs();
  EXPECT_NE(failed.reason().find("checkpoint.dir"), std::string::npos) << failed.reason();
  EXPECT_NE(failed.reason().find(file), std::string::npos) << failed.reason();
  EXPECT_EQ(failed.steps_done(), 0);
  EXPECT_EQ(failed.restarts(), 0);
}

TEST_F(JobLifecycleTest, SpecsSizedToAbortAProcessAreRefusedAndTheClusterKeepsWorking) {
  StartCluster(2);
  struct Case {
    std::string field;
    std::function<void(v1::JobSpec&)> mutate;
  };
  const std::vector<Case> cases = {
      {"steps", [](v1::JobSpec& s) { s.set_steps(std::numeric_limits<int32_t>::max()); }},
      {"data.synthetic.num_tokens",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000);
       }},
      {"name", [](v1::JobSpec& s) { s.set_name(std::string(10 << 20, '7')); }},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = TinyJob(3);
    c.mutate(*req.mutable_spec());
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(s.error_message().rfind(c.field + ": must be ", 0), 0u) << s.error_message();
  }
  v1::Job job = Submit(TinyJob(3));
  v1::Job done = WaitFor(job.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                         absl::Seconds(60));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster_->Logs();
  EXPECT_TRUE(cluster_->coordinator().Running());
}

TEST_F(JobLifecycleTest, WorkerRefusesAnOversizedSpecSentToItDirectly) {
  StartCluster(2);
  v1::ListWorkersResponse workers;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       workers.workers_size() < 2 && absl::Now() < deadline;) {
    workers.Clear();
    v1::ListWorkersRequest req;
    ASSERT_TRUE(stub_->ListWorkers(Context().get(), req, &workers).ok());
    if (workers.workers_size() < 2) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(workers.workers_size(), 2) << cluster_->Logs();
  auto worker = v1::WorkerService::NewStub(
      grpc::CreateChannel(workers.workers(0).address(), grpc::InsecureChannelCredentials()));
  v1::SetupJobRequest setup;
  setup.set_job_id("job-direct");
  setup.set_rank(0);
  setup.set_world_size(1);
  *setup.mutable_spec() = TinyJob(3, 1);
  setup.mutable_spec()->mutable_data()->mutable_synthetic()->set_num_tokens(1'000'000'000'000);
  v1::SetupJobResponse setup_resp;
  grpc::Status s = worker->SetupJob(Context().get(), setup, &setup_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("data.synthetic.num_tokens"), std::string::npos)
      << s.error_message();

  v1::GetWorkerStatusRequest status_req;
  v1::WorkerStatus status;
  ASSERT_TRUE(worker->GetWorkerStatus(Context().get(), status_req, &status).ok())
      << cluster_->Logs();
  EXPECT_EQ(status.phase(), "idle");
  EXPECT_TRUE(status.healthy());
  v1::Job job = Submit(TinyJob(3));
  v1::Job done = WaitFor(job.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                         absl::Seconds(60));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster_->Logs();
}

TEST_F(JobLifecycleTest, AJobThatCannotFitDoesNotBlockASmallerOneBehindIt) {
  StartCluster(2);
  v1::Job huge = Submit(TinyJob(5, /*world_size=*/1000));
  v1::Job small = Submit(TinyJob(3, /*world_size=*/1));
  v1::Job done = WaitFor(small.id(), [](const v1::Job& j) { return IsTerminal(j.state()); },
                         absl::Seconds(60));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster_->Logs();
  v1::Job waiting = Get(huge.id());
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_NE(waiting.reason().find("1000 healthy CPU workers"), std::string::npos)
      << waiting.reason();
  EXPECT_NE(waiting.reason().find("2 registered"), std::string::npos) << waiting.reason();
}

TEST_F(JobLifecycleTest, ListJobsPagesAndDeleteJob) {
  StartCluster(0);
  std::vector<std::string> ids;
  for (int i = 0; i < 130; ++i) ids.push_back(Submit(TinyJob(1, 1)).id());
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    v1::ListJobsRequest req;
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(Context().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(resp.jobs_size(), 100);
    for (const v1::Job& j : resp.jobs()) listed.push_back(j.id());
    token = resp.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 2);
  ASSERT_EQ(listed.size(), ids.size());
  EXPECT_EQ(listed.front(), ids.back());  // newest first
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()).size(), ids.size());

  v1::ListJobsRequest bad;
  bad.set_page_size(-1);
  v1::ListJobsResponse ignored;
  EXPECT_EQ(stub_->ListJobs(Context().get(), bad, &ignored).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::DeleteJobRequest del;
  v1::DeleteJobResponse del_resp;
  del.set_job_id(ids[0]);
  EXPECT_EQ(stub_->DeleteJob(Context().get(), del, &del_resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // still pending
  v1::CancelJobRequest cancel;
  cancel.set_job_id(ids[0]);
  v1::Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
  WaitFor(ids[0], [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Seconds(10));
  grpc::Status deleted = stub_->DeleteJob(Context().get(), del, &del_resp);
  EXPECT_TRUE(deleted.ok()) << deleted.error_message();
  v1::GetJobRequest get;
  get.set_job_id(ids[0]);
  v1::Job gone;
  EXPECT_EQ(stub_->GetJob(Context().get(), get, &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(stub_->DeleteJob(Context().get(), del, &del_resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace tessera

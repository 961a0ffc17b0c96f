// Suspend and resume across real processes: a coordinator and two CPU
// worker daemons on loopback.
//
// - `tessera suspend --wait` mid-run: the job is SUSPENDED at a committed
//   step, both workers are free; `tessera resume` runs it to SUCCEEDED with
//   every step reported once and each loss bit-identical to an unbroken run.
// - SIGTERM to a worker mid-run: the worker asks for the suspend, waits for
//   its release and exits 0 well within its grace period; the job is
//   SUSPENDED, and resumed on the survivor plus a replacement it ends
//   SUCCEEDED with the losses of an unbroken run.
// - SIGTERM to a worker of a job without checkpoint.dir: the job cannot be
//   suspended (neither can `tessera suspend` do it), so the worker aborts it
//   at once as before and the job fails.
#include <signal.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::BinaryPath;
using testing::IsTerminal;
using testing::LocalCluster;
using testing::RunCommand;

// Long enough that a request made after a few steps lands mid-run.
constexpr int kSteps = 50;

class SuspendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start(2, {"--heartbeat_interval_ms=200"});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::JobSpec Job(const std::string& checkpoint_name) {
    return testing::SmallCpuJob(
        "suspend", kSteps, /*seed=*/5,
        checkpoint_name.empty() ? "" : cluster_->dir() + "/" + checkpoint_name);
  }

  std::string Submit(const v1::JobSpec& spec) { return testing::SubmitOrFail(*stub_, spec).id(); }

  v1::Job Get(const std::string& id) { return testing::GetJobOrFail(*stub_, id); }

  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  absl::Duration timeout = absl::Seconds(60)) {
    return testing::WaitForJobOrFail(*stub_, id, done, timeout, [&] { return cluster_->Logs(); });
  }

  v1::Job WaitEnded(const std::string& id) {
    return WaitFor(id, [](const v1::Job& j) { return IsTerminal(j.state()); });
  }

  // Loss per step, and how many records each step has.
  std::map<int, float> Losses(const std::string& id, std::map<int, int>* records) {
    return testing::StepLossesOrFail(*stub_, id, records);
  }

  // Runs the unbroken reference job and returns its losses.
  std::map<int, float> ReferenceLosses() {
    const std::string id = Submit(Job("unbroken"));
    const v1::Job done = WaitEnded(id);
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
    std::map<int, int> records;
    return Losses(id, &records);
  }

  // The finished job has every step once, each loss equal to `want`'s.
  void ExpectLossesOfAnUnbrokenRun(const std::string& id, const std::map<int, float>& want) {
    std::map<int, int> records;
    const std::map<int, float> got = Losses(id, &records);
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(got.at(step), want.at(step)) << "step " << step;
      EXPECT_EQ(records[step], 1) << "step " << step;
    }
  }

  void ExpectWorkersFree() {
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(stub_->ListWorkers(testing::ContextWithDeadline().get(), v1::ListWorkersRequest(),
                                   &resp)
                    .ok());
    for (const v1::WorkerRecord& w : resp.workers()) {
      EXPECT_TRUE(w.job_id().empty()) << w.DebugString();
    }
  }

  // The harness index of the worker process registered as `worker_id`.
  int ProcessOf(const std::string& worker_id) {
    const absl::StatusOr<int> process = cluster_->WorkerProcess(worker_id);
    if (process.ok()) return *process;
    ADD_FAILURE() << process.status();
    return 0;
  }

  testing::CommandResult Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = args;
    argv.push_back("--coordinator=" + cluster_->address());
    return RunCommand(BinaryPath("client/tessera"), argv, absl::Seconds(60));
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(SuspendTest, SuspendedByTheCliAndResumedItEndsWithTheLossesOfAnUnbrokenRun) {
  const std::map<int, float> want = ReferenceLosses();
  const std::string id = Submit(Job("suspended"));
  WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 3; });

  const testing::CommandResult suspend = Cli({"suspend", id, "--wait", "--reason", "maintenance"});
  ASSERT_EQ(suspend.exit_code, 0) << suspend.output << cluster_->Logs();
  const v1::Job suspended = Get(id);
  ASSERT_EQ(suspended.state(), v1::SUSPENDED) << suspended.reason();
  const int at = suspended.committed_step();
  EXPECT_GT(at, 3);
  EXPECT_LT(at, kSteps);
  EXPECT_EQ(suspended.reason(),
            absl::StrCat("suspended at step ", at, " (checkpoint committed): maintenance"));
  EXPECT_EQ(suspend.output, absl::StrCat(id, " is SUSPENDED: ", suspended.reason(), "\n"));
  EXPECT_EQ(suspended.steps_done(), at);
  ExpectWorkersFree();

  const testing::CommandResult resume = Cli({"resume", id});
  ASSERT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(absl::StartsWith(resume.output,
                               absl::StrCat("resuming ", id, " from checkpoint step ", at)))
      << resume.output;
  const v1::Job done = WaitEnded(id);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(done.restarts(), 0);
  ExpectLossesOfAnUnbrokenRun(id, want);
}

TEST_F(SuspendTest, AWorkerStoppedWithSigtermSuspendsItsJobWhichResumesElsewhere) {
  const std::map<int, float> want = ReferenceLosses();
  const std::string id = Submit(Job("sigterm"));
  const v1::Job running = WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 3; });
  ASSERT_EQ(running.worker_ids_size(), 2);
  const std::string stopped_id = running.worker_ids(1);
  testing::ChildProcess& stopped = cluster_->worker(ProcessOf(stopped_id));

  const absl::Time start = absl::Now();
  ASSERT_EQ(stopped.Stop(absl::Seconds(60)), 0) << stopped.Log();  // SIGTERM, then its exit
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));  // released, not the 25 s grace period
  EXPECT_TRUE(absl::StrContains(stopped.Log(), absl::StrCat("released this worker from ", id)))
      << stopped.Log();

  const v1::Job suspended = WaitFor(id, [](const v1::Job& j) { return j.state() != v1::RUNNING; });
  ASSERT_EQ(suspended.state(), v1::SUSPENDED) << suspended.reason() << "\n" << cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(suspended.reason(),
                                absl::StrCat("worker ", stopped_id, " is shutting down")))
      << suspended.reason();
  EXPECT_GT(suspended.committed_step(), 3);

  ASSERT_TRUE(cluster_->AddWorker().ok());
  v1::ResumeJobRequest req;
  req.set_job_id(id);
  v1::Job resumed;
  grpc::Status s = stub_->ResumeJob(testing::ContextWithDeadline().get(), req, &resumed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::Job done = WaitEnded(id);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  ASSERT_EQ(done.worker_ids_size(), 2);
  for (const std::string& w : done.worker_ids()) EXPECT_NE(w, stopped_id);
  ExpectLossesOfAnUnbrokenRun(id, want);
}

TEST_F(SuspendTest, WithoutACheckpointDirSigtermAbortsTheJobAtOnceAsBefore) {
  v1::JobSpec spec = Job("");
  spec.set_steps(100000);  // still running when the signal comes, however fast the steps
  const std::string id = Submit(spec);
  const v1::Job running = WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 3; });
  const testing::CommandResult refused = Cli({"suspend", id});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "FAILED_PRECONDITION")) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "checkpoint.dir")) << refused.output;

  testing::ChildProcess& stopped = cluster_->worker(ProcessOf(running.worker_ids(0)));
  const absl::Time start = absl::Now();
  ASSERT_EQ(stopped.Stop(absl::Seconds(60)), 0) << stopped.Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(stopped.Log(), "checkpoint.dir")) << stopped.Log();
  const v1::Job failed = WaitEnded(id);
  EXPECT_EQ(failed.state(), v1::FAILED) << failed.reason();
}

}  // namespace
}  // namespace tessera

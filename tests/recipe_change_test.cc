// A change of FP8 recipe on resume, across real processes: a coordinator and
// two CPU worker daemons on loopback.
//
// - a job trains with FP8 (delayed scaling) and checkpoints; a second job
//   resumes from its latest checkpoint with fp8.disabled: true, trains on to
//   SUCCEEDED with finite losses for exactly the steps after the checkpoint,
//   its STARTING event records the change of recipe, and each rank's log
//   says what happened to its state;
// - a resume that also changes a model dimension is still refused: the job
//   FAILS with FAILED_PRECONDITION naming the field, and the workers take
//   the next job.
#include <cmath>
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

using testing::IsTerminal;
using testing::LocalCluster;

constexpr int kFirstSteps = 6, kTotalSteps = 10;
constexpr char kChange[] =
    "FP8 recipe changed from delayed scaling (amax history 16) to disabled (bf16)";

class RecipeChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::Job RunToEnd(const v1::JobSpec& spec) {
    const std::string id = testing::SubmitOrFail(*stub_, spec).id();
    return testing::WaitForJobOrFail(
        *stub_, id, [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Seconds(120),
        [this] { return cluster_->Logs(); });
  }

  // The job's log lines so far (every rank).
  std::vector<v1::LogLine> LogLines(const std::string& id) {
    v1::StreamJobLogsRequest request;
    request.set_job_id(id);
    auto context = testing::ContextWithDeadline();
    std::unique_ptr<grpc::ClientReader<v1::LogLine>> reader =
        stub_->StreamJobLogs(context.get(), request);
    std::vector<v1::LogLine> lines;
    v1::LogLine line;
    while (reader->Read(&line)) lines.push_back(line);
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return lines;
  }

  // A job that trained kFirstSteps steps with FP8 and committed its checkpoint.
  v1::JobSpec TrainWithFp8(const std::string& dir) {
    v1::JobSpec first = testing::SmallCpuJob("fp8", kFirstSteps, /*seed=*/21, dir, 3);
    first.mutable_fp8()->mutable_delayed()->set_amax_history_len(16);
    const v1::Job done = RunToEnd(first);
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
    v1::JobSpec resumed = first;
    resumed.set_name("resumed");
    resumed.set_steps(kTotalSteps);
    resumed.mutable_checkpoint()->set_resume_from("latest");
    return resumed;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(RecipeChangeTest, AJobResumesInBf16FromAnFp8CheckpointAndItsEventsSaySo) {
  v1::JobSpec bf16 = TrainWithFp8(cluster_->dir() + "/switch");
  bf16.mutable_fp8()->set_disabled(true);
  const v1::Job done = RunToEnd(bf16);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();

  const std::vector<v1::JobEvent> events = testing::JobEventsOrFail(*stub_, done.id());
  bool recorded = false;
  std::vector<int> steps;
  for (const v1::JobEvent& e : events) {
    if (e.has_state_change() && e.state_change().state() == v1::STARTING) {
      EXPECT_TRUE(absl::StrContains(e.state_change().reason(),
                                    absl::StrCat("resuming from step ", kFirstSteps, ": ", kChange)))
          << e.state_change().reason();
      recorded = true;
    }
    if (e.has_step()) {
      steps.push_back(e.step().step());
      EXPECT_TRUE(std::isfinite(e.step().loss())) << "step " << e.step().step();
    }
  }
  EXPECT_TRUE(recorded) << "no STARTING event";
  std::vector<int> want;
  for (int s = kFirstSteps; s < kTotalSteps; ++s) want.push_back(s);
  EXPECT_EQ(steps, want);

  // Both ranks' logs say it (the lines reach the coordinator with the
  // workers' next reports, so they are waited for).
  int ranks_saying_it = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ranks_saying_it < 2 && absl::Now() < deadline) {
    ranks_saying_it = 0;
    for (const v1::LogLine& line : LogLines(done.id())) {
      ranks_saying_it += absl::StrContains(line.message(), kChange) &&
                         absl::StrContains(line.message(), "master weights and Adam moments "
                                                           "restored as saved");
    }
    if (ranks_saying_it < 2) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(ranks_saying_it, 2) << cluster_->Logs();
}

TEST_F(RecipeChangeTest, AResumeThatChangesTheModelIsStillRefusedNamingTheField) {
  v1::JobSpec wider = TrainWithFp8(cluster_->dir() + "/refused");
  wider.mutable_fp8()->set_disabled(true);
  wider.mutable_model()->set_ffn_dim(192);
  const v1::Job done = RunToEnd(wider);
  EXPECT_EQ(done.state(), v1::FAILED) << done.reason();
  EXPECT_TRUE(absl::StrContains(done.reason(), "FAILED_PRECONDITION")) << done.reason();
  EXPECT_TRUE(absl::StrContains(done.reason(), "model.ffn_dim: the checkpoint has 128, this job 192"))
      << done.reason();
  // The workers are free for the next job.
  EXPECT_EQ(RunToEnd(testing::SmallCpuJob("after", 2, 3)).state(), v1::SUCCEEDED)
      << cluster_->Logs();
}

}  // namespace
}  // namespace tessera

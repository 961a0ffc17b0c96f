// Priorities and preemption across real processes: a coordinator, two CPU
// worker daemons and the CLI on loopback.
//
// On a full cluster (a priority-2 job holds both workers), the CLI's dry run
// of a priority-8 job says it would preempt that job; submitted, it does:
// the victim is suspended at a step boundary with a checkpoint, the urgent
// job runs to SUCCEEDED on the freed workers, and the victim resumes by
// itself from its checkpoint and finishes with every step's loss, the final
// one included, bit-identical to an unpreempted run of the same job. The
// preemption's cost (time from the decision to the workers being free, steps
// redone) is reported in the events, and `tessera watch` prints it.
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

// Long enough that the urgent job arrives mid-run.
constexpr int kSteps = 80;

// The urgent job as a job file: the same small model, priority 8, no
// checkpoints.
constexpr char kUrgentJob[] = R"(name: urgent
world_size: 2
device_kind: CPU
steps: 20
seed: 9
priority: 8
model: {vocab_size: 256, d_model: 64, n_layers: 2, n_heads: 2, ffn_dim: 128, seq_len: 32}
data: {synthetic: {task: ADDITION}, micro_batch_size: 4}
optimizer: {lr: 0.003, warmup_steps: 2}
)";

class PreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start(2, {"--heartbeat_interval_ms=200"});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::JobSpec LowPriorityJob(const std::string& checkpoint_name) {
    v1::JobSpec spec = testing::SmallCpuJob("batch", kSteps, /*seed=*/7,
                                            cluster_->dir() + "/" + checkpoint_name,
                                            /*checkpoint_interval=*/20);
    spec.set_priority(2);
    return spec;
  }

  v1::Job Get(const std::string& id) { return testing::GetJobOrFail(*stub_, id); }

  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  absl::Duration timeout = absl::Seconds(90)) {
    return testing::WaitForJobOrFail(*stub_, id, done, timeout, [&] { return cluster_->Logs(); });
  }

  v1::Job WaitEnded(const std::string& id) {
    return WaitFor(id, [](const v1::Job& j) { return IsTerminal(j.state()); });
  }

  // Loss per step (the last record of each step), and records per step.
  std::map<int, float> Losses(const std::string& id, std::map<int, int>* records) {
    return testing::StepLossesOrFail(*stub_, id, records);
  }

  testing::CommandResult Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = args;
    argv.push_back("--coordinator=" + cluster_->address());
    return RunCommand(BinaryPath("client/tessera"), argv, absl::Seconds(60));
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(PreemptionTest, AnUrgentJobPreemptsAndTheVictimResumesByItselfWithTheSameLosses) {
  // The unpreempted run of the victim's job.
  const std::string reference = testing::SubmitOrFail(*stub_, LowPriorityJob("reference")).id();
  ASSERT_EQ(WaitEnded(reference).state(), v1::SUCCEEDED) << cluster_->Logs();
  std::map<int, int> reference_records;
  const std::map<int, float> want = Losses(reference, &reference_records);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  const std::string victim = testing::SubmitOrFail(*stub_, LowPriorityJob("victim")).id();
  WaitFor(victim, [](const v1::Job& j) { return j.state() == v1::RUNNING && j.steps_done() >= 3; });
  const std::string urgent_file = cluster_->dir() + "/urgent.yaml";
  {
    FILE* f = fopen(urgent_file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(kUrgentJob, f);
    fclose(f);
  }
  // The dry run names the job it would preempt, and submits nothing.
  const testing::CommandResult dry = Cli({"submit", urgent_file, "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_TRUE(absl::StrContains(dry.output, "# placement: would preempt " + victim)) << dry.output;
  EXPECT_TRUE(absl::StrContains(dry.output, "busy with " + victim + " (priority 2)"))
      << dry.output;

  const testing::CommandResult submitted = Cli({"submit", urgent_file, "--json"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  v1::ListJobsResponse listed;
  ASSERT_TRUE(stub_->ListJobs(testing::ContextWithDeadline().get(), v1::ListJobsRequest(), &listed)
                  .ok());
  ASSERT_EQ(listed.jobs_size(), 3);  // the reference, the victim and the urgent job
  const std::string urgent = listed.jobs(0).id();
  EXPECT_EQ(listed.jobs(0).spec().priority(), 8);

  const v1::Job urgent_done = WaitEnded(urgent);
  ASSERT_EQ(urgent_done.state(), v1::SUCCEEDED) << urgent_done.reason() << cluster_->Logs();
  const v1::Job done = WaitEnded(victim);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster_->Logs();
  EXPECT_EQ(done.preemptions(), 1);
  EXPECT_EQ(done.restarts(), 0);

  // Same losses as the unpreempted run, bit for bit, every step once.
  std::map<int, int> records;
  const std::map<int, float> got = Losses(victim, &records);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.at(step), want.at(step)) << "step " << step;
    EXPECT_EQ(records[step], 1) << "step " << step;
  }
  EXPECT_EQ(got.at(kSteps - 1), want.at(kSteps - 1));  // the final loss

  // It went SUSPENDED -> PENDING by itself, and the cost was reported.
  std::vector<v1::JobState> states;
  v1::Preemption freed;
  for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, victim)) {
    if (e.has_state_change()) states.push_back(e.state_change().state());
    if (e.has_preemption() && e.preemption().stage() == v1::Preemption::WORKERS_FREE) {
      freed = e.preemption();
    }
  }
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::PENDING, v1::STARTING, v1::RUNNING,
                                               v1::SUSPENDED, v1::PENDING, v1::STARTING,
                                               v1::RUNNING, v1::SUCCEEDED}));
  EXPECT_EQ(freed.preemptor_job_id(), urgent);
  EXPECT_TRUE(freed.requeued());
  EXPECT_GT(freed.seconds_to_free(), 0.0);
  EXPECT_LT(freed.seconds_to_free(), 60.0);
  EXPECT_GT(freed.stopped_at_step(), 3);
  EXPECT_EQ(freed.steps_redone(), 0);
  std::printf("preemption cost: workers free %.3f s after the decision, %d steps redone "
              "(stopped at step %d)\n",
              freed.seconds_to_free(), freed.steps_redone(), freed.stopped_at_step());

  const testing::CommandResult watched = Cli({"watch", victim});
  EXPECT_EQ(watched.exit_code, 0) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output,
                                "[preempted] by " + urgent + " (priority 8), suspending"))
      << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "[preemption] " + victim + "'s workers free "))
      << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "(0 steps to redo)")) << watched.output;
}

}  // namespace
}  // namespace tessera

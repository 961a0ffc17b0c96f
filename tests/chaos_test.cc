// Seeded chaos: a job on a coordinator and two CPU workers loses a worker K
// times at steps a seed picks, and must still end as if nothing happened.
//
// Each kill is the worker's own `exit` failpoint (worker/daemon/failpoints.h):
// the worker process that is to die is started with
// --failpoints=exit@step=S and SIGKILLs itself just before step S, exactly
// as kill -9 would, at a step the test knows. After each death a replacement
// worker starts, armed for the next kill (the last one unarmed); the job
// (max_restarts = K, a checkpoint every few steps) restarts from its newest
// committed checkpoint on the survivor and the replacement.
//
// Asserted: SUCCEEDED with K restarts; after deduplication by the client's
// rule (common/step_history.h) every step appears exactly once and every
// step's loss, the final one included, has the same bits as an unbroken
// run's. Printed: recovery time per kill (the worker's kill time, which it
// logs, to the coordinator's first step event of the next attempt) as p50
// and max, and the steps lost (run again after a restart).
//
// The seed is fixed so CI is deterministic; TESSERA_CHAOS_SEED picks another.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/step_history.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::ChildProcess;
using testing::LocalCluster;

constexpr uint32_t kDefaultSeed = 20261123;
constexpr int kKills = 3;
constexpr int kSteps = 60;
constexpr int kCheckpointInterval = 3;

// Fast liveness so each loss is noticed within a few seconds.
const std::vector<std::string> kFastFailureFlags = {
    "--worker_timeout_ms=2000", "--heartbeat_interval_ms=200", "--collective_timeout_ms=3000"};

v1::JobSpec ChaosJob(const std::string& checkpoint_dir, int max_restarts) {
  v1::JobSpec spec =
      testing::SmallCpuJob("chaos", kSteps, /*seed=*/7, checkpoint_dir, kCheckpointInterval);
  spec.set_max_restarts(max_restarts);
  return spec;
}

uint32_t Seed() {
  const char* text = std::getenv("TESSERA_CHAOS_SEED");
  uint32_t seed = kDefaultSeed;
  if (text != nullptr && !absl::SimpleAtoi(text, &seed)) {
    ADD_FAILURE() << "TESSERA_CHAOS_SEED=" << text << " is not a number";
  }
  return seed;
}

// K distinct kill steps, ascending, each after the first checkpoints so
// there is always a committed one to resume from.
std::vector<int> KillSteps(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(2 * kCheckpointInterval + 1, kSteps - 2);
  std::set<int> steps;
  while (static_cast<int>(steps.size()) < kKills) steps.insert(pick(rng));
  return {steps.begin(), steps.end()};
}

uint32_t Bits(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// The time_unix_ms the worker logged when its exit failpoint fired.
int64_t KillTimeFromLog(const std::string& log) {
  const std::string key = "time_unix_ms=";
  const size_t at = log.rfind(key);
  if (at == std::string::npos) return -1;
  int64_t ms = -1;
  const size_t end = log.find(')', at);
  if (!absl::SimpleAtoi(log.substr(at + key.size(), end - at - key.size()), &ms)) return -1;
  return ms;
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start(0, kFastFailureFlags);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  // A CPU worker armed with `failpoints` (empty: none), once registered.
  ChildProcess* StartWorker(const std::string& failpoints) {
    std::vector<std::string> args = {absl::StrCat("--coordinator=", cluster_->address()),
                                     "--device=cpu"};
    if (!failpoints.empty()) args.push_back(absl::StrCat("--failpoints=", failpoints));
    auto worker = ChildProcess::Start(testing::BinaryPath("worker/tessera-worker"), args,
                                      absl::StrCat(cluster_->dir(), "/chaos-worker-",
                                                   workers_.size(), ".log"));
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return nullptr;
    workers_.push_back(std::move(*worker));
    auto serving = workers_.back()->WaitForLine("serving on", absl::Seconds(30));
    EXPECT_TRUE(serving.ok()) << serving.status();
    return workers_.back().get();
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = stub_->GetJob(testing::ContextWithDeadline().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  v1::Job WaitEnded(const std::string& id, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    v1::Job job;
    while (absl::Now() < deadline) {
      job = Get(id);
      if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED ||
          job.state() == v1::CANCELLED) {
        return job;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "job " << id << " still " << v1::JobState_Name(job.state()) << "\n"
                  << Logs();
    return job;
  }

  std::vector<v1::JobEvent> Events(const std::string& id) {
    return testing::JobEventsOrFail(*stub_, id);
  }

  std::string Logs() {
    std::string out = cluster_->Logs();
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::StrAppend(&out, "--- chaos worker ", i, " ---\n", workers_[i]->Log());
    }
    return out;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST_F(ChaosTest, SeededKillsEndWithTheLossesOfAnUnbrokenRunAndEveryStepOnce) {
  const uint32_t seed = Seed();
  const std::vector<int> kill_steps = KillSteps(seed);
  std::printf("chaos: seed %u, %d kills before steps %s of %d, checkpoint every %d steps\n", seed,
              kKills, absl::StrJoin(kill_steps, ", ").c_str(), kSteps, kCheckpointInterval);

  // The unbroken run, on two unarmed workers, which then leave.
  ASSERT_NE(StartWorker(""), nullptr);
  ASSERT_NE(StartWorker(""), nullptr);
  const std::string reference =
      testing::SubmitOrFail(*stub_, ChaosJob(cluster_->dir() + "/unbroken", 0)).id();
  const v1::Job reference_done = WaitEnded(reference, absl::Seconds(120));
  ASSERT_EQ(reference_done.state(), v1::SUCCEEDED) << reference_done.reason() << "\n" << Logs();
  StepHistory want;
  for (const v1::JobEvent& e : Events(reference)) {
    if (e.has_step()) want.Add(e.step());
  }
  ASSERT_EQ(want.steps().size(), static_cast<size_t>(kSteps));
  // One of them stays for the chaos run; the other stops and its place goes
  // to the worker armed for the first kill. The stopped one must have left
  // the registry before the job is placed.
  ASSERT_EQ(workers_[1]->Stop(), 0);
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    v1::ListWorkersResponse list;
    ASSERT_TRUE(
        stub_->ListWorkers(testing::ContextWithDeadline().get(), v1::ListWorkersRequest(), &list)
            .ok());
    if (list.workers_size() == 1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ChildProcess* armed = StartWorker(absl::StrCat("exit@step=", kill_steps[0]));
  ASSERT_NE(armed, nullptr);

  const std::string id =
      testing::SubmitOrFail(*stub_, ChaosJob(cluster_->dir() + "/chaos", kKills)).id();
  std::vector<int64_t> kill_ms;
  for (int k = 0; k < kKills; ++k) {
    // The armed worker dies by its own SIGKILL at its step.
    ASSERT_EQ(armed->WaitExit(absl::Seconds(120)), 128 + 9)
        << "kill " << k + 1 << " did not happen\n" << Logs();
    kill_ms.push_back(KillTimeFromLog(armed->Log()));
    ASSERT_GT(kill_ms.back(), 0) << armed->Log();
    const std::string next =
        k + 1 < kKills ? absl::StrCat("exit@step=", kill_steps[k + 1]) : std::string();
    armed = StartWorker(next);
    ASSERT_NE(armed, nullptr);
  }
  const v1::Job done = WaitEnded(id, absl::Seconds(180));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << Logs();
  EXPECT_EQ(done.restarts(), kKills);
  EXPECT_EQ(done.steps_done(), kSteps);

  // Every step once after deduplication, with the unbroken run's bits.
  const std::vector<v1::JobEvent> events = Events(id);
  StepHistory got;
  int records = 0;
  // Per attempt: when its first step was reported, and its first and last
  // steps.
  std::vector<int64_t> first_step_ms(kKills + 1, -1);
  std::vector<int> first_step(kKills + 1, -1);
  std::vector<int> last_step(kKills + 1, -1);
  for (const v1::JobEvent& e : events) {
    if (!e.has_step()) continue;
    ++records;
    got.Add(e.step());
    const int attempt = e.step().attempt();
    ASSERT_GE(attempt, 0);
    ASSERT_LE(attempt, kKills);
    if (first_step_ms[attempt] < 0) {
      first_step_ms[attempt] = e.time_unix_ms();
      first_step[attempt] = e.step().step();
    }
    last_step[attempt] = std::max(last_step[attempt], e.step().step());
  }
  ASSERT_EQ(got.steps().size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_EQ(got.steps().count(step), 1u) << "step " << step;
    EXPECT_EQ(Bits(got.steps().at(step).loss()), Bits(want.steps().at(step).loss()))
        << "step " << step << ": " << got.steps().at(step).loss() << " vs "
        << want.steps().at(step).loss();
  }
  EXPECT_EQ(Bits(got.steps().at(kSteps - 1).loss()), Bits(want.steps().at(kSteps - 1).loss()));

  // Recovery: kill -> first step of the attempt it caused. Steps lost: the
  // steps reported before the kill that the next attempt ran again.
  std::vector<double> recovery_s;
  std::vector<int> lost;
  for (int k = 0; k < kKills; ++k) {
    ASSERT_GE(first_step_ms[k + 1], 0) << "attempt " << k + 1 << " reported no step";
    recovery_s.push_back(static_cast<double>(first_step_ms[k + 1] - kill_ms[k]) / 1000.0);
    lost.push_back(last_step[k] + 1 - first_step[k + 1]);
    EXPECT_GT(recovery_s.back(), 0.0);
    // The killed rank never ran its kill step, so neither did the job.
    EXPECT_LT(last_step[k], kill_steps[k]) << "attempt " << k;
    // It resumed from a committed checkpoint at or before the kill, at most
    // the checkpoint interval plus one commit behind.
    EXPECT_GE(lost.back(), 0);
    EXPECT_LE(lost.back(), 2 * kCheckpointInterval);
  }
  EXPECT_EQ(last_step[kKills], kSteps - 1);
  EXPECT_EQ(records - kSteps, std::accumulate(lost.begin(), lost.end(), 0));
  std::vector<double> sorted = recovery_s;
  std::sort(sorted.begin(), sorted.end());
  const double p50 = sorted[sorted.size() / 2];
  const double max = sorted.back();
  std::vector<std::string> each;
  for (int k = 0; k < kKills; ++k) {
    each.push_back(absl::StrFormat("kill %d before step %d: recovered in %.2f s, %d steps lost",
                                   k + 1, kill_steps[k], recovery_s[k], lost[k]));
  }
  std::printf("chaos: %s\n", absl::StrJoin(each, "; ").c_str());
  std::printf(
      "chaos: seed %u: %d kills, recovery p50 %.2f s, max %.2f s; steps lost %d of %d "
      "(%d step records for %d steps)\n",
      seed, kKills, p50, max, records - kSteps, kSteps, records, kSteps);
  std::fflush(stdout);
}

}  // namespace
}  // namespace tessera

// Failures across real processes, recovered: a coordinator and CPU worker
// daemons on loopback, a worker killed with SIGKILL or stopped with SIGSTOP
// in the middle of a job.
//
// - kill -9 with max_restarts: 1: the job restarts on the survivor plus a
//   replacement worker, resumes from its newest committed checkpoint, and
//   ends SUCCEEDED with every step's loss bit-identical to an unbroken run
//   (each step once after keeping the latest attempt's record).
// - a second kill with the budget spent: FAILED with "restarts exhausted".
// - SIGSTOP: the job leaves RUNNING within the liveness timeout, the
//   surviving worker takes the next job, and after SIGCONT the stopped
//   worker aborts its stale job instead of failing the jobs placed on it.
// - a job placed on a worker killed a moment before (its heartbeats have
//   not timed out yet) is placed on another worker instead of failing.
// - kill -9 of the coordinator mid-run: the restarted coordinator tells the
//   workers, which re-register still running the old job, to abort it, and
//   the next job runs on them (also when the restarted coordinator hands a
//   worker's old id to the other worker); a job without a checkpoint fails
//   saying so, one with a checkpoint resumes and finishes with its history
//   intact and the losses of an unbroken run.
// - a committed checkpoint damaged on disk: the job resuming from it fails
//   at once with DATA_LOSS naming the file, and the workers stay usable.
#include <signal.h>

#include <fstream>
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

using testing::IsTerminal;
using testing::LocalCluster;

// Fast liveness so each failure is noticed within a few seconds.
const std::vector<std::string> kFastFailureFlags = {
    "--worker_timeout_ms=2000", "--heartbeat_interval_ms=200", "--collective_timeout_ms=3000"};

// A model small enough for 2 cores, with steps long enough (a few
// milliseconds) that a kill lands mid-run.
v1::JobSpec SmallJob(int steps, const std::string& checkpoint_dir) {
  return testing::SmallCpuJob("restart", steps, /*seed=*/11, checkpoint_dir);
}

class RestartTest : public ::testing::Test {
 protected:
  void StartCluster(int workers) {
    auto cluster = LocalCluster::Start(workers, kFastFailureFlags);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(10)) {
    return testing::ContextWithDeadline(timeout);
  }

  std::string Submit(const v1::JobSpec& spec) { return testing::SubmitOrFail(*stub_, spec).id(); }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = stub_->GetJob(Context().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  template <typename Pred>
  v1::Job WaitFor(const std::string& id, Pred pred, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    v1::Job job;
    while (absl::Now() < deadline) {
      job = Get(id);
      if (pred(job)) return job;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "timed out; job " << id << " is " << v1::JobState_Name(job.state())
                  << ": " << job.reason() << "\n"
                  << cluster_->Logs();
    return job;
  }

  v1::Job WaitEnded(const std::string& id, absl::Duration timeout = absl::Seconds(90)) {
    return WaitFor(id, [](const v1::Job& j) { return IsTerminal(j.state()); }, timeout);
  }

  std::vector<v1::JobEvent> Events(const std::string& id) {
    return testing::JobEventsOrFail(*stub_, id);
  }

  // Loss per step, keeping each step's record of the latest attempt (the
  // documented rule); `records` counts the records seen per step.
  static std::map<int, float> LatestLosses(const std::vector<v1::JobEvent>& events,
                                           std::map<int, int>* records = nullptr) {
    std::map<int, std::pair<int, float>> latest;  // step -> (attempt, loss)
    for (const v1::JobEvent& e : events) {
      if (!e.has_step()) continue;
      if (records != nullptr) ++(*records)[e.step().step()];
      auto it = latest.find(e.step().step());
      if (it == latest.end() || e.step().attempt() >= it->second.first) {
        latest[e.step().step()] = {e.step().attempt(), e.step().loss()};
      }
    }
    std::map<int, float> losses;
    for (const auto& [step, entry] : latest) losses[step] = entry.second;
    return losses;
  }

  std::vector<v1::WorkerRecord> Workers() {
    v1::ListWorkersRequest req;
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(stub_->ListWorkers(Context().get(), req, &resp).ok());
    return {resp.workers().begin(), resp.workers().end()};
  }

  // The harness index of the worker process that registered as `worker_id`.
  int ProcessOf(const std::string& worker_id) {
    const absl::StatusOr<int> process = cluster_->WorkerProcess(worker_id);
    if (process.ok()) return *process;
    ADD_FAILURE() << process.status() << "\n" << cluster_->Logs();
    return 0;
  }

  std::string CheckpointDir(const std::string& name) { return cluster_->dir() + "/" + name; }

  // kill -9 of the coordinator, then a new one on the same address and state
  // directory, and a fresh channel to it.
  void KillAndRestartCoordinator() {
    cluster_->coordinator().Kill();
    std::vector<std::string> flags = {absl::StrCat("--listen=", cluster_->address()),
                                      absl::StrCat("--state_dir=", cluster_->dir(), "/state")};
    flags.insert(flags.end(), kFastFailureFlags.begin(), kFastFailureFlags.end());
    auto coordinator =
        testing::ChildProcess::Start(testing::BinaryPath("server/tessera-coordinator"), flags,
                                     cluster_->dir() + "/coordinator-restarted.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    restarted_ = std::move(*coordinator);
    ASSERT_TRUE(restarted_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << restarted_->Log();
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  std::string AllLogs() {
    return cluster_->Logs() + (restarted_ ? "--- restarted coordinator ---\n" + restarted_->Log()
                                          : std::string());
  }

  std::unique_ptr<testing::ChildProcess> restarted_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(RestartTest, AKilledWorkerIsReplacedAndTheJobResumesToTheLossesOfAnUnbrokenRun) {
  StartCluster(2);
  constexpr int kSteps = 40;
  // The unbroken run, for reference.
  const std::string reference = Submit(SmallJob(kSteps, CheckpointDir("unbroken")));
  v1::Job reference_done = WaitEnded(reference);
  ASSERT_EQ(reference_done.state(), v1::SUCCEEDED) << reference_done.reason();
  const std::map<int, float> want = LatestLosses(Events(reference));
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  v1::JobSpec spec = SmallJob(kSteps, CheckpointDir("restarted"));
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  v1::Job running = WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 12; },
                            absl::Seconds(60));
  ASSERT_EQ(running.state(), v1::RUNNING);
  ASSERT_EQ(running.worker_ids_size(), 2);
  const int victim = ProcessOf(running.worker_ids(1));
  cluster_->worker(victim).Kill();
  absl::StatusOr<int> replacement = cluster_->AddWorker();
  ASSERT_TRUE(replacement.ok()) << replacement.status();

  v1::Job done = WaitEnded(id);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_EQ(done.steps_done(), kSteps);
  EXPECT_EQ(done.committed_step(), kSteps);

  const std::vector<v1::JobEvent> events = Events(id);
  std::vector<std::string> transitions;
  for (const v1::JobEvent& e : events) {
    if (!e.has_state_change()) continue;
    transitions.push_back(absl::StrCat(v1::JobState_Name(e.state_change().state()), ": ",
                                       e.state_change().reason()));
  }
  // PENDING, STARTING, RUNNING, RESTARTING, STARTING, RUNNING, SUCCEEDED.
  ASSERT_EQ(transitions.size(), 7u) << ::testing::PrintToString(transitions);
  EXPECT_TRUE(absl::StartsWith(transitions[3], "RESTARTING: restart 1 of 1 after: "))
      << transitions[3];
  EXPECT_TRUE(absl::StrContains(transitions[3], "will resume from checkpoint step "))
      << transitions[3];
  EXPECT_TRUE(absl::StartsWith(transitions[4], "STARTING: attempt 2: ")) << transitions[4];
  EXPECT_TRUE(absl::StrContains(transitions[4], "resuming from step ")) << transitions[4];

  // Every step once, and each loss bit-identical to the unbroken run's.
  std::map<int, int> records;
  const std::map<int, float> got = LatestLosses(events, &records);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.at(step), want.at(step)) << "step " << step;
  }
  int repeated = 0;
  for (const auto& [step, n] : records) repeated += n - 1;
  EXPECT_GT(repeated, 0);  // the steps after the checkpoint ran again
  EXPECT_LT(repeated, 10);  // at most the checkpoint interval plus the step in flight

  // The killed worker is gone from the registry; the rest are free.
  absl::SleepFor(absl::Milliseconds(500));
  for (const v1::WorkerRecord& w : Workers()) {
    EXPECT_NE(w.worker_id(), running.worker_ids(1));
    EXPECT_TRUE(w.job_id().empty()) << w.DebugString();
  }
}

TEST_F(RestartTest, ASecondKillWithTheBudgetSpentFailsWithRestartsExhausted) {
  StartCluster(3);  // the restart takes the remaining pool: no replacement needed
  v1::JobSpec spec = SmallJob(100000, CheckpointDir("exhausted"));
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  v1::Job first = WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 3; },
                          absl::Seconds(60));
  cluster_->worker(ProcessOf(first.worker_ids(0))).Kill();

  v1::Job second = WaitFor(
      id,
      [](const v1::Job& j) {
        return IsTerminal(j.state()) ||
               (j.restarts() == 1 && j.state() == v1::RUNNING && j.last_metrics().attempt() == 1);
      },
      absl::Seconds(60));
  ASSERT_EQ(second.state(), v1::RUNNING) << second.reason() << "\n" << cluster_->Logs();
  cluster_->worker(ProcessOf(second.worker_ids(1))).Kill();

  const absl::Time killed = absl::Now();
  v1::Job done = WaitEnded(id, absl::Seconds(30));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(15));
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_TRUE(absl::StrContains(done.reason(), "restarts exhausted (1 of 1 used)"))
      << done.reason();
}

TEST_F(RestartTest, AStoppedWorkerFailsItsJobAndNeitherWorkerIsLeftBusy) {
  StartCluster(2);
  const std::string id = Submit(SmallJob(100000, ""));
  v1::Job running = WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 3; },
                            absl::Seconds(60));
  const std::string stopped_id = running.worker_ids(1);
  const std::string survivor_id = running.worker_ids(0);
  const pid_t stopped = cluster_->worker(ProcessOf(stopped_id)).pid();
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const absl::Time stopped_at = absl::Now();
  v1::Job failed = WaitFor(id, [](const v1::Job& j) { return j.state() != v1::RUNNING; },
                           absl::Seconds(30));
  // Noticed by the heartbeat timeout (2 s); the survivor's Abort then waits
  // for its collective to time out (3 s).
  EXPECT_LT(absl::Now() - stopped_at, absl::Seconds(10));
  EXPECT_EQ(failed.state(), v1::FAILED) << failed.reason();

  // The survivor takes the next job.
  v1::JobSpec one = SmallJob(3, "");
  one.set_world_size(1);
  const std::string next = Submit(one);
  v1::Job next_done = WaitEnded(next, absl::Seconds(30));
  EXPECT_EQ(next_done.state(), v1::SUCCEEDED) << next_done.reason() << "\n" << cluster_->Logs();
  ASSERT_EQ(next_done.worker_ids_size(), 1);
  EXPECT_EQ(next_done.worker_ids(0), survivor_id);

  // After SIGCONT the stopped worker re-registers still holding the old job;
  // it is told to abort it, and jobs placed on it run.
  ASSERT_EQ(kill(stopped, SIGCONT), 0);
  for (int i = 0; i < 2; ++i) {
    const std::string pair = Submit(SmallJob(3, ""));
    v1::Job pair_done = WaitEnded(pair, absl::Seconds(60));
    EXPECT_EQ(pair_done.state(), v1::SUCCEEDED) << pair_done.reason() << "\n" << cluster_->Logs();
  }
  EXPECT_TRUE(absl::StrContains(cluster_->worker(ProcessOf(stopped_id)).Log(),
                                absl::StrCat("aborting ", id)))
      << cluster_->Logs();
  for (const v1::WorkerRecord& w : Workers()) {
    EXPECT_TRUE(w.job_id().empty()) << w.DebugString();
    EXPECT_TRUE(w.activity().job_id().empty()) << w.DebugString();
  }
}

TEST_F(RestartTest, WorkersStillRunningAJobWhenTheCoordinatorRestartsAbortItAndTakeNewJobs) {
  StartCluster(2);
  const std::string old_job = Submit(SmallJob(100000, ""));  // no checkpoint to resume from
  WaitFor(old_job, [](const v1::Job& j) { return j.steps_done() >= 3; }, absl::Seconds(60));
  KillAndRestartCoordinator();
  v1::Job failed = Get(old_job);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_TRUE(absl::StrContains(failed.reason(), "committed no checkpoint")) << failed.reason();

  // Both workers re-register holding the old job; each is told to abort it
  // and only then takes new work. Before, every new job failed "busy".
  for (int i = 0; i < 2; ++i) {
    const std::string id = Submit(SmallJob(3, ""));
    v1::Job done = WaitEnded(id, absl::Seconds(60));
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << AllLogs();
  }
  for (int i = 0; i < cluster_->num_workers(); ++i) {
    EXPECT_TRUE(absl::StrContains(cluster_->worker(i).Log(), absl::StrCat("aborting ", old_job)))
        << cluster_->worker(i).Log();
  }
}

// A checkpoint damaged on disk after it was committed: a job resuming from
// it fails with DATA_LOSS naming the file, at once (a damaged checkpoint is
// not retried, whatever the budget), and its workers take the next job.
TEST_F(RestartTest, ADamagedCheckpointIsRefusedNamingTheFile) {
  StartCluster(2);
  const std::string dir = CheckpointDir("damaged");
  const std::string first = Submit(SmallJob(10, dir));
  ASSERT_EQ(WaitEnded(first).state(), v1::SUCCEEDED) << AllLogs();
  const std::string state = dir + "/step-10/rank-1.state";
  {
    std::fstream file(state, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << state;
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    ASSERT_GT(size, 100);
    file.seekg(size / 2);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    file.seekp(size / 2);
    file.write(&byte, 1);
  }
  v1::JobSpec resume = SmallJob(20, dir);
  resume.mutable_checkpoint()->set_resume_from("latest");
  resume.set_max_restarts(2);
  v1::Job done = WaitEnded(Submit(resume));
  EXPECT_EQ(done.state(), v1::FAILED) << done.reason();
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_TRUE(absl::StrContains(done.reason(), "DATA_LOSS")) << done.reason();
  EXPECT_TRUE(absl::StrContains(done.reason(), "rank-1.state")) << done.reason();
  EXPECT_EQ(WaitEnded(Submit(SmallJob(3, ""))).state(), v1::SUCCEEDED) << AllLogs();
}

TEST_F(RestartTest, AJobSurvivesItsCoordinatorBeingKilledWithItsHistoryIntact) {
  StartCluster(2);
  constexpr int kSteps = 40;
  const std::string reference = Submit(SmallJob(kSteps, CheckpointDir("unbroken")));
  ASSERT_EQ(WaitEnded(reference).state(), v1::SUCCEEDED);
  const std::map<int, float> want = LatestLosses(Events(reference));

  const std::string id = Submit(SmallJob(kSteps, CheckpointDir("crashed")));
  WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 12; }, absl::Seconds(60));
  KillAndRestartCoordinator();

  v1::Job done = WaitEnded(id);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << AllLogs();
  EXPECT_EQ(done.restarts(), 0);  // the coordinator's restart is not the job's
  const std::vector<v1::JobEvent> events = Events(id);
  // The history from before the crash is there, in sequence, and the
  // RESTARTING event says where the job resumed.
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
  }
  bool resumed = false;
  for (const v1::JobEvent& e : events) {
    if (e.has_state_change() && e.state_change().state() == v1::RESTARTING) {
      EXPECT_TRUE(absl::StrContains(e.state_change().reason(), "the coordinator restarted"))
          << e.state_change().reason();
      resumed = true;
    }
  }
  EXPECT_TRUE(resumed);
  const std::map<int, float> got = LatestLosses(events);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.at(step), want.at(step)) << "step " << step;
  }
}

TEST_F(RestartTest, AJobPlacedOnAWorkerThatJustDiedRunsElsewhere) {
  StartCluster(2);
  // w-1 registered first, so it is the first free worker placed on.
  cluster_->worker(ProcessOf("w-1")).Kill();
  v1::JobSpec one = SmallJob(3, "");
  one.set_world_size(1);
  const std::string id = Submit(one);  // placed well before the 2 s heartbeat timeout
  v1::Job done = WaitEnded(id, absl::Seconds(30));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(done.restarts(), 0);
  ASSERT_EQ(done.worker_ids_size(), 1);
  EXPECT_NE(done.worker_ids(0), "w-1");
}

}  // namespace
}  // namespace tessera

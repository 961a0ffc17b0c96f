// JobRunner feeds each rank's compute time per step (its step time less its
// collective waits) to the straggler detector and reports what it names:
// a rank slower in its own work is named once, with the step and window; a
// rank whose step time is long only because it waited for its peers is
// not; the detector is fed only complete steps.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/fake_worker_connection.h"
#include "server/job_runner.h"

namespace tessera {
namespace {

// Runs a `steps`-step job on fakes with `behaviors`; returns the changes
// reported through on_slow_rank, each checked to follow its step's record.
std::vector<StragglerChange> RunAndCollect(int steps, std::vector<FakeWorkerBehavior> behaviors,
                                           StragglerOptions options) {
  std::vector<std::unique_ptr<WorkerConnection>> connections;
  std::vector<std::string> ids;
  for (size_t r = 0; r < behaviors.size(); ++r) {
    connections.push_back(std::make_unique<FakeWorkerConnection>(static_cast<int>(r), behaviors[r]));
    ids.push_back("w-" + std::to_string(r + 1));
  }
  absl::Mutex mu;
  std::vector<StragglerChange> changes;
  int last_step_recorded = -1;
  JobRunnerCallbacks callbacks;
  callbacks.on_step = [&](const v1::StepMetrics& m) {
    absl::MutexLock lock(&mu);
    last_step_recorded = m.step();
  };
  callbacks.on_slow_rank = [&](const StragglerChange& change) {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(change.step, last_step_recorded);
    changes.push_back(change);
  };
  v1::JobSpec spec;
  spec.set_steps(steps);
  spec.set_world_size(static_cast<int>(behaviors.size()));
  JobRunner runner("job-1", spec, ids, std::move(connections), "coord:1", absl::Seconds(5),
                   callbacks, JobAttempt(), options);
  const JobOutcome outcome = runner.Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  absl::MutexLock lock(&mu);
  return changes;
}

StragglerOptions Window(int steps) {
  StragglerOptions options;
  options.threshold = 0.1;
  options.window_steps = steps;
  return options;
}

TEST(JobRunnerSlowRanks, ARankSlowerInItsOwnWorkIsNamedOnceWhenTheWindowFills) {
  // The fake reports step_time * (1 + rank): rank 1's work takes twice rank 0's.
  std::vector<StragglerChange> changes =
      RunAndCollect(30, {FakeWorkerBehavior(), FakeWorkerBehavior()}, Window(10));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_TRUE(changes[0].slow);
  EXPECT_EQ(changes[0].step, 9);
  EXPECT_EQ(changes[0].window_steps, 10);
  EXPECT_NEAR(changes[0].slowdown, 1.0, 1e-9);
}

TEST(JobRunnerSlowRanks, TimeSpentWaitingOnCollectivesIsNotTheRanksOwnWork) {
  // Rank 1's 2 ms steps include 1 ms waiting for rank 0: both worked 1 ms.
  FakeWorkerBehavior waiting;
  waiting.collective_wait = absl::Milliseconds(1);
  EXPECT_TRUE(RunAndCollect(30, {FakeWorkerBehavior(), waiting}, Window(10)).empty());
}

TEST(JobRunnerSlowRanks, AOneRankJobNamesNothing) {
  EXPECT_TRUE(RunAndCollect(30, {FakeWorkerBehavior()}, Window(5)).empty());
}

}  // namespace
}  // namespace tessera

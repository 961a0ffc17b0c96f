// Priorities in the scheduler: the queue order (priority, then jobs that
// started before, then submission), backfill and the starvation hold under
// priorities, preemption decisions (victims, the hold while they suspend,
// no second round of victims for the same workers, no victims without a
// checkpoint.dir), the busy jobs a waiting job names, and dry runs.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/scheduler.h"

namespace tessera {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::JobSpec Spec(int world, int priority = 0) {
  v1::JobSpec s;
  s.set_world_size(world);
  s.set_device_kind(v1::CPU);
  s.set_priority(priority);
  return s;
}

std::vector<std::string> Started(const std::vector<Placement>& placements) {
  std::vector<std::string> ids;
  for (const Placement& p : placements) ids.push_back(p.job_id);
  return ids;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class SchedulerPriorityTest : public ::testing::Test {
 protected:
  // `n` CPU workers; returns their ids, oldest first.
  std::vector<std::string> AddWorkers(int n) {
    std::vector<std::string> ids;
    v1::DeviceInfo cpu;
    cpu.set_kind(v1::CPU);
    for (int i = 0; i < n; ++i) {
      ids.push_back(registry_.Register("h:" + std::to_string(next_port_++), cpu, kT0));
    }
    return ids;
  }
  // `job_id` holds `workers`; returned as the scheduler sees a running job.
  RunningJob Run(const std::string& job_id, const std::vector<std::string>& workers, int priority,
                 int started_s, const std::string& not_preemptible = "") {
    for (const std::string& w : workers) registry_.Assign(w, job_id);
    RunningJob r;
    r.job_id = job_id;
    r.priority = priority;
    r.workers = static_cast<int>(workers.size());
    r.started = kT0 + absl::Seconds(started_s);
    r.not_preemptible = not_preemptible;
    return r;
  }

  WorkerRegistry registry_{absl::Seconds(5)};
  Scheduler scheduler_{absl::Minutes(5)};
  int next_port_ = 1;
};

TEST_F(SchedulerPriorityTest, HigherPriorityGoesFirstThenSubmissionOrder) {
  scheduler_.Enqueue("low", Spec(1, 2), kT0);
  scheduler_.Enqueue("default-1", Spec(1), kT0);
  scheduler_.Enqueue("high", Spec(1, 9), kT0);
  scheduler_.Enqueue("default-2", Spec(1, 5), kT0);  // 5 is the default
  EXPECT_EQ(scheduler_.Position("high"), 1);
  EXPECT_EQ(scheduler_.Position("default-1"), 2);
  EXPECT_EQ(scheduler_.Position("default-2"), 3);
  EXPECT_EQ(scheduler_.Position("low"), 4);
  AddWorkers(2);
  EXPECT_EQ(Started(scheduler_.Schedule(registry_, kT0)),
            (std::vector<std::string>{"high", "default-1"}));
}

TEST_F(SchedulerPriorityTest, JobsThatStartedBeforeGoAheadOnlyWithinTheirPriority) {
  scheduler_.Enqueue("new-5", Spec(1, 5), kT0);
  scheduler_.Enqueue("new-9", Spec(1, 9), kT0);
  scheduler_.EnqueueRestart("restarting-5", Spec(1, 5), kT0);
  scheduler_.EnqueuePreempted("preempted-5", Spec(1, 5), kT0);
  scheduler_.EnqueueRestart("restarting-2", Spec(1, 2), kT0);
  EXPECT_EQ(scheduler_.Position("new-9"), 1);
  EXPECT_EQ(scheduler_.Position("restarting-5"), 2);
  EXPECT_EQ(scheduler_.Position("preempted-5"), 3);
  EXPECT_EQ(scheduler_.Position("new-5"), 4);
  EXPECT_EQ(scheduler_.Position("restarting-2"), 5);
}

TEST_F(SchedulerPriorityTest, BackfillStillStartsALowerPriorityJobThatFits) {
  std::vector<std::string> w = AddWorkers(3);
  const RunningJob busy = Run("job-0", {w[0]}, 5, 0, "has no checkpoint.dir");
  scheduler_.Enqueue("big-high", Spec(3, 8), kT0);
  scheduler_.Enqueue("small-low", Spec(2, 1), kT0);
  // big-high cannot preempt job-0 (no checkpoint.dir), so it waits, and
  // small-low fits the two free workers now.
  const std::vector<RunningJob> running = {busy};
  std::map<std::string, std::string> reasons = scheduler_.PendingReasons(registry_, kT0, running);
  EXPECT_TRUE(Has(reasons["big-high"], "busy with job-0 (priority 5, 1 worker)"))
      << reasons["big-high"];
  EXPECT_TRUE(Has(reasons["big-high"], "not preemptible: job-0 (priority 5) has no checkpoint.dir"))
      << reasons["big-high"];
  std::vector<PreemptionDecision> preemptions;
  EXPECT_EQ(Started(scheduler_.Schedule(registry_, kT0, running, &preemptions)),
            std::vector<std::string>{"small-low"});
  EXPECT_TRUE(preemptions.empty());
}

TEST_F(SchedulerPriorityTest, StarvationHoldNeverBlocksAHigherPriorityJob) {
  std::vector<std::string> w = AddWorkers(2);
  Run("job-0", {w[0]}, 5, 0, "has no checkpoint.dir");
  scheduler_.Enqueue("starving", Spec(2, 3), kT0);
  scheduler_.Enqueue("urgent", Spec(1, 9), kT0 + absl::Minutes(9));
  // Past the bound "starving" holds the kind, but "urgent" is ahead of it.
  EXPECT_EQ(Started(scheduler_.Schedule(registry_, kT0 + absl::Minutes(10))),
            std::vector<std::string>{"urgent"});
}

TEST_F(SchedulerPriorityTest, APendingJobPreemptsLowerPriorityAndHoldsTheKind) {
  std::vector<std::string> w = AddWorkers(4);
  std::vector<RunningJob> running = {Run("low-old", {w[0], w[1]}, 2, 0),
                                     Run("low-new", {w[2], w[3]}, 2, 60)};
  scheduler_.Enqueue("high", Spec(2, 8), kT0);
  scheduler_.Enqueue("small", Spec(1, 5), kT0);
  std::vector<PreemptionDecision> preemptions;
  EXPECT_TRUE(scheduler_.Schedule(registry_, kT0, running, &preemptions).empty());
  ASSERT_EQ(preemptions.size(), 1u);
  EXPECT_EQ(preemptions[0].job_id, "high");
  EXPECT_EQ(preemptions[0].priority, 8);
  // One victim is enough: the one started most recently.
  EXPECT_EQ(preemptions[0].victims, std::vector<std::string>{"low-new"});

  // While it suspends, no second victim is chosen, and "small" (behind
  // "high") may not take what frees up.
  running[1].preempted_for = "high";
  std::map<std::string, std::string> reasons = scheduler_.PendingReasons(registry_, kT0, running);
  EXPECT_TRUE(Has(reasons["high"], "preempting low-new: suspending at the next step boundary"))
      << reasons["high"];
  EXPECT_TRUE(Has(reasons["small"], "waiting behind high")) << reasons["small"];
  EXPECT_TRUE(scheduler_.Schedule(registry_, kT0, running, &preemptions).empty());
  EXPECT_TRUE(preemptions.empty());
  registry_.Release(w[2], "low-new", /*confirmed_idle=*/true);  // one of two released
  running[1].workers = 1;
  EXPECT_TRUE(scheduler_.Schedule(registry_, kT0, running, &preemptions).empty());
  // One worker still on its way from low-new, and one free: enough, so no
  // new victim.
  EXPECT_TRUE(preemptions.empty());
  registry_.Release(w[3], "low-new", /*confirmed_idle=*/true);
  running.pop_back();
  EXPECT_EQ(Started(scheduler_.Schedule(registry_, kT0, running, &preemptions)),
            std::vector<std::string>{"high"});
  // Now "small" (priority 5) is first, finds no free worker and preempts
  // the remaining priority-2 job in turn.
  ASSERT_EQ(preemptions.size(), 1u);
  EXPECT_EQ(preemptions[0].job_id, "small");
  EXPECT_EQ(preemptions[0].victims, std::vector<std::string>{"low-old"});
}

TEST_F(SchedulerPriorityTest, EqualPriorityAndUncheckpointedJobsAreNotPreempted) {
  std::vector<std::string> w = AddWorkers(2);
  const std::vector<RunningJob> running = {Run("peer", {w[0]}, 6, 0),
                                           Run("no-dir", {w[1]}, 1, 0, "has no checkpoint.dir")};
  scheduler_.Enqueue("six", Spec(2, 6), kT0);
  std::vector<PreemptionDecision> preemptions;
  EXPECT_TRUE(scheduler_.Schedule(registry_, kT0, running, &preemptions).empty());
  EXPECT_TRUE(preemptions.empty());
  const std::string reason = scheduler_.PendingReasons(registry_, kT0, running)["six"];
  EXPECT_TRUE(Has(reason, "no running job of lower priority than 6 can be preempted")) << reason;
  EXPECT_TRUE(Has(reason, "not preemptible: no-dir (priority 1) has no checkpoint.dir")) << reason;
}

TEST_F(SchedulerPriorityTest, TwoPreemptorsNeverCountOnTheSameVictim) {
  std::vector<std::string> w = AddWorkers(2);
  const std::vector<RunningJob> running = {Run("low", {w[0], w[1]}, 1, 0)};
  scheduler_.Enqueue("a", Spec(2, 9), kT0);
  scheduler_.Enqueue("b", Spec(2, 9), kT0);
  std::vector<PreemptionDecision> preemptions;
  scheduler_.Schedule(registry_, kT0, running, &preemptions);
  ASSERT_EQ(preemptions.size(), 1u);
  EXPECT_EQ(preemptions[0].job_id, "a");
}

TEST_F(SchedulerPriorityTest, DryRunSaysWhereItWouldRunWhomItWouldPreemptOrWhy) {
  std::vector<std::string> w = AddWorkers(3);
  const std::vector<RunningJob> running = {Run("low", {w[0]}, 2, 0)};
  scheduler_.Enqueue("queued", Spec(1, 9), kT0);  // takes w[1] in the round

  DryRunPlacement now = scheduler_.DryRun(Spec(1), registry_, running, kT0);
  EXPECT_EQ(now.outcome, DryRunPlacement::Outcome::kStartNow);
  EXPECT_EQ(now.worker_ids, std::vector<std::string>{w[2]});
  EXPECT_EQ(now.queue_position, 2);

  DryRunPlacement preempt = scheduler_.DryRun(Spec(2, 7), registry_, running, kT0);
  EXPECT_EQ(preempt.outcome, DryRunPlacement::Outcome::kPreempt);
  EXPECT_EQ(preempt.victims, std::vector<std::string>{"low"});

  DryRunPlacement wait = scheduler_.DryRun(Spec(2, 2), registry_, running, kT0);
  EXPECT_EQ(wait.outcome, DryRunPlacement::Outcome::kWait);
  EXPECT_TRUE(Has(wait.reason, "busy with low (priority 2, 1 worker)")) << wait.reason;
  EXPECT_EQ(wait.queue_position, 2);

  DryRunPlacement never = scheduler_.DryRun(Spec(5), registry_, running, kT0);
  EXPECT_TRUE(Has(never.reason, "waiting for 5 healthy CPU workers to register")) << never.reason;
  // Nothing changed.
  EXPECT_EQ(scheduler_.Position("queued"), 1);
  EXPECT_EQ(scheduler_.Position("(dry run)"), 0);
}

}  // namespace
}  // namespace tessera

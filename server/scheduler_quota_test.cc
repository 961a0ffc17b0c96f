// Quotas in the gang scheduler over a real WorkerRegistry: a job over its
// owner's quota waits with the quota as its reason and never holds its
// device kind (other users' jobs start past it even under strict FIFO);
// jobs placed in one round add up; the owner's smaller jobs backfill past
// it until the starvation bound, then wait behind it; a job larger than the
// quota never holds anything; a restarting job over quota blocks only its
// owner; a raised quota lets the waiting job start.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/scheduler.h"

namespace tessera {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::JobSpec Spec(int world) {
  v1::JobSpec s;
  s.set_world_size(world);
  s.set_device_kind(v1::CPU);
  return s;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> Started(const std::vector<Placement>& placements) {
  std::vector<std::string> ids;
  for (const Placement& p : placements) ids.push_back(p.job_id);
  return ids;
}

class SchedulerQuotaTest : public ::testing::Test {
 protected:
  void AddWorkers(int n) {
    v1::DeviceInfo cpu;
    cpu.set_kind(v1::CPU);
    for (int i = 0; i < n; ++i) {
      workers_.push_back(registry_.Register("h:" + std::to_string(i), cpu, kT0));
    }
  }
  // Queues `job_id` of `owner`.
  void Submit(Scheduler& scheduler, const std::string& job_id, const std::string& owner, int world,
              absl::Time at = kT0) {
    scheduler.Enqueue(job_id, Spec(world), at);
    owners_[job_id] = owner;
  }
  // A job of `owner` already running on `world` workers.
  void Running(const std::string& job_id, const std::string& owner, int world) {
    for (int i = 0; i < world; ++i) registry_.Assign(registry_.FreeWorkers(v1::CPU)[0], job_id);
    holding_[owner] += world;
  }
  // What the coordinator hands the scheduler: the quotas, what each owner
  // holds and who owns each queued job.
  QuotaLedger Ledger(const std::map<std::string, int>& limits) const {
    WorkerQuotas quotas;
    for (const auto& [user, limit] : limits) {
      if (user == "*") {
        quotas.others = limit;
      } else {
        quotas.per_user[user] = limit;
      }
    }
    QuotaLedger ledger(quotas);
    for (const auto& [owner, held] : holding_) ledger.Hold(owner, held);
    for (const auto& [job, owner] : owners_) ledger.SetOwner(job, owner);
    return ledger;
  }

  WorkerRegistry registry_{absl::Seconds(5)};
  std::vector<std::string> workers_;
  std::map<std::string, std::string> owners_;
  std::map<std::string, int> holding_;
};

TEST_F(SchedulerQuotaTest, AJobOverQuotaWaitsAndDoesNotHoldItsKindEvenUnderStrictFifo) {
  Scheduler scheduler(absl::ZeroDuration());  // every runnable job that waits holds its kind
  AddWorkers(5);
  Running("job-1", "alice", 2);
  Submit(scheduler, "job-2", "alice", 2);
  Submit(scheduler, "job-3", "bob", 3);
  const absl::Time later = kT0 + absl::Hours(1);
  const QuotaLedger quotas = Ledger({{"alice", 2}});

  const std::string reason = scheduler.PendingReasons(registry_, later, {}, quotas)["job-2"];
  EXPECT_TRUE(Has(reason,
                  "waiting for quota: user alice may hold 2 workers, holds 2, this job "
                  "needs 2"))
      << reason;
  // job-2 could run on the 3 free workers, but its quota holds it back, and
  // bob's job behind it takes them.
  EXPECT_EQ(Started(scheduler.Schedule(registry_, later, {}, nullptr, quotas)),
            std::vector<std::string>{"job-3"});
  EXPECT_EQ(scheduler.Position("job-2"), 1);

  // Without quotas the same queue starts job-2 and bob's job waits behind it.
  Scheduler unlimited(absl::ZeroDuration());
  unlimited.Enqueue("job-2", Spec(2), kT0);
  unlimited.Enqueue("job-3", Spec(3), kT0);
  EXPECT_EQ(Started(unlimited.Schedule(registry_, later)), std::vector<std::string>{"job-2"});
}

// The dry run (submit --dry-run) applies the caller's quota as a submit
// would: alice, at her limit, is told she would wait for it; bob, with
// the same spec, would start now.
TEST_F(SchedulerQuotaTest, ADryRunSaysTheCallerWouldWaitForTheirQuota) {
  Scheduler scheduler;
  AddWorkers(4);
  Running("job-1", "alice", 2);
  const QuotaLedger quotas = Ledger({{"alice", 2}});
  const DryRunPlacement alice = scheduler.DryRun(Spec(2), registry_, {}, kT0, quotas, "alice");
  EXPECT_EQ(alice.outcome, DryRunPlacement::Outcome::kWait);
  EXPECT_TRUE(Has(alice.reason, "waiting for quota: user alice may hold 2 workers, holds 2"))
      << alice.reason;
  const DryRunPlacement bob = scheduler.DryRun(Spec(2), registry_, {}, kT0, quotas, "bob");
  EXPECT_EQ(bob.outcome, DryRunPlacement::Outcome::kStartNow) << bob.reason;
  EXPECT_EQ(bob.worker_ids.size(), 2u);
}

TEST_F(SchedulerQuotaTest, JobsPlacedInOneRoundAddUpAgainstTheQuota) {
  Scheduler scheduler;
  AddWorkers(6);
  Submit(scheduler, "a-1", "alice", 2);
  Submit(scheduler, "a-2", "alice", 2);
  Submit(scheduler, "b-1", "bob", 2);
  Submit(scheduler, "a-3", "alice", 1);
  const QuotaLedger quotas = Ledger({{"alice", 3}, {"*", 2}});
  std::map<std::string, std::string> reasons = scheduler.PendingReasons(registry_, kT0, {}, quotas);
  EXPECT_TRUE(Has(reasons["a-2"], "user alice may hold 3 workers, holds 2, this job needs 2"))
      << reasons["a-2"];
  // a-3 fits what a-1 leaves of alice's quota, so it backfills past a-2.
  EXPECT_EQ(Started(scheduler.Schedule(registry_, kT0, {}, nullptr, quotas)),
            (std::vector<std::string>{"a-1", "b-1", "a-3"}));
  EXPECT_EQ(scheduler.Position("a-2"), 1);
}

TEST_F(SchedulerQuotaTest, TheOwnersLaterJobsBackfillUntilTheBoundThenWaitBehindIt) {
  AddWorkers(6);
  Running("job-0", "alice", 1);
  // Before the bound: alice's 1-worker job starts past her 3-worker one.
  {
    Scheduler scheduler(absl::Minutes(5));
    Submit(scheduler, "big", "alice", 3);
    Submit(scheduler, "small", "alice", 1, kT0 + absl::Seconds(1));
    EXPECT_EQ(
        Started(scheduler.Schedule(registry_, kT0 + absl::Minutes(4), {}, nullptr, Ledger({{"alice", 3}}))),
        std::vector<std::string>{"small"});
  }
  // Past it: "big" reserves alice's quota; her later job waits, bob's does not.
  Scheduler scheduler(absl::Minutes(5));
  Submit(scheduler, "big", "alice", 3);
  Submit(scheduler, "small", "alice", 1, kT0 + absl::Seconds(1));
  Submit(scheduler, "bob", "bob", 2, kT0 + absl::Seconds(2));
  const QuotaLedger quotas = Ledger({{"alice", 3}});
  const absl::Time late = kT0 + absl::Minutes(6);
  std::map<std::string, std::string> reasons = scheduler.PendingReasons(registry_, late, {}, quotas);
  EXPECT_TRUE(Has(reasons["big"], "user alice may hold 3 workers, holds 1, this job needs 3"))
      << reasons["big"];
  EXPECT_TRUE(Has(reasons["small"], "waiting for quota: big, queued earlier by user alice"))
      << reasons["small"];
  EXPECT_EQ(Started(scheduler.Schedule(registry_, late, {}, nullptr, quotas)), std::vector<std::string>{"bob"});
  // Once alice's running job ends, "big" starts first.
  holding_.clear();
  registry_.Release(workers_[0], "job-0", /*confirmed_idle=*/true);
  EXPECT_EQ(Started(scheduler.Schedule(registry_, late, {}, nullptr, Ledger({{"alice", 3}}))),
            std::vector<std::string>{"big"});
}

TEST_F(SchedulerQuotaTest, AJobLargerThanTheQuotaWaitsForARaiseAndHoldsNothing) {
  Scheduler scheduler(absl::ZeroDuration());
  AddWorkers(4);
  Submit(scheduler, "huge", "alice", 3);
  Submit(scheduler, "small", "alice", 2);
  const absl::Time later = kT0 + absl::Hours(1);
  std::map<std::string, std::string> reasons =
      scheduler.PendingReasons(registry_, later, {}, Ledger({{"alice", 2}}));
  EXPECT_TRUE(Has(reasons["huge"],
                  "user alice may hold 2 workers and this job needs 3, more than "
                  "the quota; it waits until the quota is raised"))
      << reasons["huge"];
  std::vector<Placement> placed = scheduler.Schedule(registry_, later, {}, nullptr, Ledger({{"alice", 2}}));
  ASSERT_EQ(Started(placed), std::vector<std::string>{"small"});
  for (const std::string& w : placed[0].worker_ids) registry_.Assign(w, "small");
  holding_["alice"] = 2;
  // A quota reloaded at 5 lets it start once workers are free for it.
  EXPECT_TRUE(Has(scheduler.PendingReasons(registry_, later, {}, Ledger({{"alice", 5}}))["huge"],
                  "waiting for 3 free healthy CPU workers"));
  for (const std::string& w : placed[0].worker_ids) registry_.Release(w, "small", true);
  holding_.clear();
  EXPECT_TRUE(scheduler.Schedule(registry_, later, {}, nullptr, Ledger({{"alice", 2}})).empty());
  EXPECT_EQ(Started(scheduler.Schedule(registry_, later, {}, nullptr, Ledger({{"alice", 5}}))),
            std::vector<std::string>{"huge"});
}

TEST_F(SchedulerQuotaTest, ARestartingJobOverQuotaHoldsOnlyItsOwnersQuota) {
  Scheduler scheduler(absl::Minutes(5));
  AddWorkers(4);
  Running("job-0", "alice", 2);  // alice's quota was lowered to 2 while job-1 ran
  scheduler.EnqueueRestart("job-1", Spec(2), kT0);
  owners_["job-1"] = "alice";
  Submit(scheduler, "a-small", "alice", 1);
  Submit(scheduler, "bob", "bob", 2);
  const QuotaLedger quotas = Ledger({{"alice", 2}});
  std::map<std::string, std::string> reasons = scheduler.PendingReasons(registry_, kT0, {}, quotas);
  EXPECT_TRUE(Has(reasons["job-1"], "waiting for quota: user alice may hold 2 workers, holds 2"))
      << reasons["job-1"];
  EXPECT_TRUE(Has(reasons["a-small"], "waiting for quota: job-1, queued earlier"))
      << reasons["a-small"];
  EXPECT_EQ(Started(scheduler.Schedule(registry_, kT0, {}, nullptr, quotas)), std::vector<std::string>{"bob"});
}

TEST_F(SchedulerQuotaTest, JobsWithoutAnOwnerOrOfUnlimitedUsersIgnoreQuotas) {
  Scheduler scheduler(absl::ZeroDuration());
  AddWorkers(3);
  Submit(scheduler, "anon", "", 2);
  Submit(scheduler, "ops", "ops", 1);
  WorkerQuotas quotas;
  quotas.others = 0;  // everyone not listed may hold nothing
  quotas.per_user["ops"] = std::nullopt;
  QuotaLedger ledger(quotas);
  ledger.SetOwner("anon", "");
  ledger.SetOwner("ops", "ops");
  ledger.Hold("ops", 50);
  EXPECT_EQ(Started(scheduler.Schedule(registry_, kT0, {}, nullptr, ledger)),
            (std::vector<std::string>{"anon", "ops"}));
}

}  // namespace
}  // namespace tessera

// Quotas through the coordinator core with in-memory workers: a job that
// would take its owner over their quota waits, its reason naming the
// quota from the moment it is submitted, and starts when the owner's other
// job ends; another user's job is not held back by it; raising the quota
// (SetQuotas, as a reload does) lets it start; lowering it stops nothing
// that runs; a job larger than the quota is accepted and waits for a
// raise; jobs without an owner have no quota.
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_core_test_base.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

const Principal kAlice{"alice", false};
const Principal kBob{"bob", false};
const Principal kOps{"ops", true};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

WorkerQuotas Quotas(int alice, std::optional<int> others = std::nullopt) {
  WorkerQuotas q;
  q.per_user["alice"] = alice;
  q.others = others;
  return q;
}

class CoordinatorQuotaTest : public CoordinatorCoreTest {
 protected:
  void Make(WorkerQuotas quotas, int workers) {
    CoordinatorOptions options = InMemoryOptions();
    options.quotas = std::move(quotas);
    // The strictest starvation rule: a held-back job that held its kind
    // would stop every job behind it at once.
    options.starvation_timeout = absl::ZeroDuration();
    StartCore(std::move(options));
    AddWorkers(workers);
  }
  // A long job of `by` on `world` workers, RUNNING.
  std::string StartLong(const Principal& by, int world) {
    const std::string id = core_->SubmitJob(TinyJobSpec(world, 1000000), by)->id();
    WaitForState(id, v1::RUNNING);
    return id;
  }
  // Ticks a few rounds; the job must still be PENDING, its reason naming the quota.
  void ExpectStillWaitingForQuota(const std::string& id, const std::string& reason) {
    for (int i = 0; i < 5; ++i) core_->Tick();
    v1::Job job = *core_->GetJob(id);
    EXPECT_EQ(job.state(), v1::PENDING) << job.reason();
    EXPECT_TRUE(Has(job.reason(), reason)) << job.reason();
  }
};

TEST_F(CoordinatorQuotaTest, AJobOverQuotaWaitsAndStartsWhenTheOwnersOtherJobEnds) {
  Make(Quotas(2), 4);
  const std::string first = StartLong(kAlice, 2);
  v1::Job second = *core_->SubmitJob(TinyJobSpec(2, 1000000), kAlice);
  EXPECT_EQ(second.state(), v1::PENDING);
  const std::string quota_reason =
      "waiting for quota: user alice may hold 2 workers, holds 2, this job needs 2";
  EXPECT_TRUE(Has(second.reason(), quota_reason)) << second.reason();
  ExpectStillWaitingForQuota(second.id(), quota_reason);

  // bob's job, queued behind it, starts on the two free workers.
  const std::string bobs = core_->SubmitJob(TinyJobSpec(2, 1000000), kBob)->id();
  WaitForState(bobs, v1::RUNNING);
  ExpectStillWaitingForQuota(second.id(), quota_reason);

  ASSERT_TRUE(core_->CancelJob(first, "", kAlice).ok());
  WaitForState(first, v1::CANCELLED);
  WaitForState(second.id(), v1::RUNNING);
  core_->Shutdown();
}

TEST_F(CoordinatorQuotaTest, AJobThatEndsByItselfFreesTheQuotaForTheNext) {
  Make(Quotas(1), 2);
  const std::string first = core_->SubmitJob(TinyJobSpec(1, 20), kAlice)->id();
  const std::string second = core_->SubmitJob(TinyJobSpec(1, 20), kAlice)->id();
  // One round places the first and, within the same round, holds the second
  // back: both would fit the free workers.
  core_->Tick();
  v1::Job waiting = *core_->GetJob(second);
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_TRUE(Has(waiting.reason(), "user alice may hold 1 worker, holds 1, this job needs 1"))
      << waiting.reason();
  WaitForState(first, v1::SUCCEEDED);
  WaitForState(second, v1::SUCCEEDED);
  core_->Shutdown();
}

TEST_F(CoordinatorQuotaTest, ARaisedQuotaLetsTheWaitingJobStartAndALoweredOneStopsNothing) {
  Make(Quotas(1), 3);
  const std::string first = StartLong(kAlice, 1);
  const std::string second = core_->SubmitJob(TinyJobSpec(1, 1000000), kAlice)->id();
  ExpectStillWaitingForQuota(second, "user alice may hold 1 worker, holds 1");

  core_->SetQuotas(Quotas(2));
  // The reason follows the new quota at once; the next round starts it.
  EXPECT_FALSE(Has(core_->GetJob(second)->reason(), "waiting for quota"))
      << core_->GetJob(second)->reason();
  WaitForState(second, v1::RUNNING);

  // Lowered below what alice holds: both keep running, a new one waits.
  core_->SetQuotas(Quotas(1));
  const std::string third = core_->SubmitJob(TinyJobSpec(1, 1000000), kAlice)->id();
  ExpectStillWaitingForQuota(third, "user alice may hold 1 worker, holds 2, this job needs 1");
  EXPECT_EQ(core_->GetJob(first)->state(), v1::RUNNING);
  EXPECT_EQ(core_->GetJob(second)->state(), v1::RUNNING);
  // Only when alice is back within the quota with room for it does it start.
  ASSERT_TRUE(core_->CancelJob(first, "", kAlice).ok());
  WaitForState(first, v1::CANCELLED);
  ExpectStillWaitingForQuota(third, "user alice may hold 1 worker, holds 1, this job needs 1");
  ASSERT_TRUE(core_->CancelJob(second, "", kAlice).ok());
  WaitForState(third, v1::RUNNING);
  core_->Shutdown();
}

TEST_F(CoordinatorQuotaTest, AJobLargerThanTheQuotaIsAcceptedAndWaitsForARaise) {
  Make(Quotas(1, /*others=*/1), 2);
  absl::StatusOr<v1::Job> big = core_->SubmitJob(TinyJobSpec(2, 1000000), kAlice);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_TRUE(Has(big->reason(),
                  "user alice may hold 1 worker and this job needs 2, more than "
                  "the quota; it waits until the quota is raised"))
      << big->reason();
  // It holds nothing back: alice's own smaller job and bob's start.
  const std::string small = core_->SubmitJob(TinyJobSpec(1, 1000000), kAlice)->id();
  const std::string bobs = core_->SubmitJob(TinyJobSpec(1, 1000000), kBob)->id();
  WaitForState(small, v1::RUNNING);
  WaitForState(bobs, v1::RUNNING);
  // bob's own limit is the `*` line's.
  const std::string bobs_second = core_->SubmitJob(TinyJobSpec(1, 1000000), kBob)->id();
  ExpectStillWaitingForQuota(bobs_second,
                             "user bob may hold 1 worker (the quota file's `*` line), holds 1");
  ExpectStillWaitingForQuota(big->id(), "more than the quota");
  core_->Shutdown();
}

TEST_F(CoordinatorQuotaTest, AdminsAreLimitedLikeEveryoneAndJobsWithoutAnOwnerAreNot) {
  Make(Quotas(1, /*others=*/0), 2);
  v1::Job ops = *core_->SubmitJob(TinyJobSpec(1, 1000000), kOps);
  EXPECT_TRUE(Has(ops.reason(), "user ops may hold 0 workers")) << ops.reason();
  // A coordinator that checks no tokens submits as nobody: no quota.
  const std::string anon = core_->SubmitJob(TinyJobSpec(2, 1000000))->id();
  WaitForState(anon, v1::RUNNING);
  EXPECT_EQ(core_->GetJob(ops.id())->state(), v1::PENDING);
  core_->Shutdown();
}

}  // namespace
}  // namespace tessera

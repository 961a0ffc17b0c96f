// The quota rule alone: a job starts while its owner's held workers plus
// its world_size stay within the quota; the reason names the user, the
// quota, what they hold and what the job needs; a job larger than the quota
// waits for a raised quota; placements in a round add up; users without a
// limit and jobs without an owner are never held back; a reservation holds
// back only the owner's later jobs.
#include "server/quota_ledger.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

WorkerQuotas Quotas() {
  WorkerQuotas q;
  q.per_user["alice"] = 2;
  q.per_user["ops"] = std::nullopt;  // unlimited
  q.per_user["zero"] = 0;
  q.others = 3;
  return q;
}

TEST(QuotaLedger, WithoutQuotasNothingIsBlocked) {
  QuotaLedger ledger;
  ledger.SetOwner("job-1", "alice");
  ledger.Hold("alice", 100);
  EXPECT_EQ(ledger.Blocked("job-1", 100), "");
}

TEST(QuotaLedger, AJobStartsWhileItsOwnerStaysWithinTheQuota) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "alice");
  EXPECT_EQ(ledger.Blocked("job-1", 2), "");  // 0 + 2 <= 2
  ledger.Hold("alice", 1);
  EXPECT_EQ(ledger.Blocked("job-1", 1), "");  // 1 + 1 <= 2
  const std::string reason = ledger.Blocked("job-1", 2);
  EXPECT_TRUE(Has(reason,
                  "waiting for quota: user alice may hold 2 workers, holds 1, this job "
                  "needs 2; it starts when alice's other jobs release 1 worker"))
      << reason;
  EXPECT_FALSE(Has(reason, "`*`")) << reason;  // alice has a line of her own
}

TEST(QuotaLedger, PlacementsInOneRoundAddUp) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "alice");
  ledger.SetOwner("job-2", "alice");
  ledger.SetOwner("job-3", "bob");
  ASSERT_EQ(ledger.Blocked("job-1", 2), "");
  ledger.Take("job-1", 2);
  EXPECT_EQ(ledger.Held("alice"), 2);
  EXPECT_TRUE(
      Has(ledger.Blocked("job-2", 2), "user alice may hold 2 workers, holds 2, this job needs 2"));
  // Another user's quota is their own (bob takes the `*` line's 3).
  EXPECT_EQ(ledger.Blocked("job-3", 3), "");
  ledger.Take("job-3", 3);
  const std::string bob = ledger.Blocked("job-3", 1);
  EXPECT_TRUE(Has(bob,
                  "user bob may hold 3 workers (the quota file's `*` line), holds 3, this "
                  "job needs 1"))
      << bob;
  EXPECT_EQ(ledger.Held("alice"), 2);
}

TEST(QuotaLedger, AJobLargerThanTheQuotaWaitsForARaisedQuota) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "alice");
  const std::string reason = ledger.Blocked("job-1", 3);
  EXPECT_TRUE(Has(reason,
                  "waiting for quota: user alice may hold 2 workers and this job needs 3, "
                  "more than the quota; it waits until the quota is raised"))
      << reason;
  ledger.SetOwner("job-2", "zero");
  EXPECT_TRUE(Has(ledger.Blocked("job-2", 1), "user zero may hold 0 workers and this job needs 1"));
}

TEST(QuotaLedger, UnlimitedUsersAndJobsWithoutAnOwnerAreNeverBlocked) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "ops");
  ledger.Hold("ops", 1000);
  EXPECT_EQ(ledger.Blocked("job-1", 1000), "");
  ledger.SetOwner("job-2", "");
  EXPECT_EQ(ledger.Blocked("job-2", 1000), "");
  EXPECT_EQ(ledger.Blocked("job-unknown", 1000), "");  // no owner recorded
  ledger.Take("job-2", 5);
  EXPECT_EQ(ledger.Held(""), 0);
}

TEST(QuotaLedger, AReservationHoldsBackOnlyTheOwnersLaterJobs) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "alice");
  ledger.SetOwner("job-2", "alice");
  ledger.SetOwner("job-3", "alice");
  ledger.SetOwner("job-4", "bob");
  ledger.Hold("alice", 1);
  ASSERT_NE(ledger.Blocked("job-1", 2), "");
  ledger.Reserve("job-1", 2);
  // job-2 would fit alice's quota, but job-1 reserved it.
  const std::string reason = ledger.Blocked("job-2", 1);
  EXPECT_TRUE(Has(reason,
                  "waiting for quota: job-1, queued earlier by user alice, has waited "
                  "past the starvation bound"))
      << reason;
  // A later reservation does not take it from job-1.
  ledger.Reserve("job-3", 1);
  EXPECT_TRUE(Has(ledger.Blocked("job-3", 1), "job-1, queued earlier"));
  // job-1 itself is held back by the quota only, and bob not at all.
  EXPECT_TRUE(Has(ledger.Blocked("job-1", 2), "user alice may hold 2 workers, holds 1"));
  EXPECT_EQ(ledger.Blocked("job-4", 1), "");
}

TEST(QuotaLedger, AJobTheQuotaCanNeverHoldReservesNothing) {
  QuotaLedger ledger(Quotas());
  ledger.SetOwner("job-1", "alice");
  ledger.SetOwner("job-2", "alice");
  ledger.Reserve("job-1", 3);  // more than alice's 2
  EXPECT_EQ(ledger.Blocked("job-2", 2), "");
  // Nor does a job of a user without a limit.
  ledger.SetOwner("job-3", "ops");
  ledger.SetOwner("job-4", "ops");
  ledger.Reserve("job-3", 1);
  EXPECT_EQ(ledger.Blocked("job-4", 1), "");
}

}  // namespace
}  // namespace tessera

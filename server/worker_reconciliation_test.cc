// Every combination of the coordinator's assignment and the worker's report.
#include "server/worker_reconciliation.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(WorkerReconciliation, AnIdleUnassignedWorkerIsFree) {
  Reconciliation r = Reconcile("", "");
  EXPECT_TRUE(r.free);
  EXPECT_TRUE(r.abort_job_id.empty());
}

TEST(WorkerReconciliation, AWorkerRunningItsAssignedJobIsBusyAndLeftAlone) {
  Reconciliation r = Reconcile("job-3", "job-3");
  EXPECT_FALSE(r.free);
  EXPECT_TRUE(r.abort_job_id.empty());
}

TEST(WorkerReconciliation, AnAssignedWorkerNotYetSetUpIsBusy) {
  // Between placement and SetupJob the worker still reports nothing.
  Reconciliation r = Reconcile("job-3", "");
  EXPECT_FALSE(r.free);
  EXPECT_TRUE(r.abort_job_id.empty());
}

TEST(WorkerReconciliation, AWorkerHoldingAJobTheCoordinatorEndedOrForgotAbortsItFirst) {
  // After SIGCONT, after a partition, or after a coordinator restart.
  Reconciliation r = Reconcile("", "job-1");
  EXPECT_FALSE(r.free);
  EXPECT_EQ(r.abort_job_id, "job-1");
}

TEST(WorkerReconciliation, AWorkerHoldingAnOldJobWhileAssignedANewOneAbortsTheOld) {
  Reconciliation r = Reconcile("job-2", "job-1");
  EXPECT_FALSE(r.free);
  EXPECT_EQ(r.abort_job_id, "job-1");
}

}  // namespace
}  // namespace tessera

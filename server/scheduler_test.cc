// Gang scheduling over a real WorkerRegistry: gangs, device kinds, unhealthy
// and busy workers, backfill past jobs that do not fit (including one that
// asks for more workers than exist, whose reason says so), the starvation
// bound that makes a long-waiting job hold its kind, restarting jobs going
// first, reasons, liveness sweeps, and the registry's reconciliation of what
// workers report with what they were assigned.
#include "server/scheduler.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::DeviceInfo Device(v1::DeviceKind kind) {
  v1::DeviceInfo d;
  d.set_kind(kind);
  return d;
}

v1::JobSpec Spec(int world, v1::DeviceKind kind = v1::CPU) {
  v1::JobSpec s;
  s.set_world_size(world);
  s.set_device_kind(kind);
  return s;
}

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::vector<std::string> Started(const std::vector<Placement>& placements) {
  std::vector<std::string> ids;
  for (const Placement& p : placements) ids.push_back(p.job_id);
  return ids;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Scheduler, PlacesAGangOnlyWhenEnoughFreeWorkersExist) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler;
  std::string a = registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Register("h:0", Device(v1::CPU), kT0);
  std::string busy = registry.Register("h:9", Device(v1::CPU), kT0);
  registry.Assign(busy, "job-0");
  scheduler.Enqueue("job-1", Spec(3), kT0);
  EXPECT_TRUE(scheduler.Schedule(registry, kT0).empty());
  EXPECT_EQ(scheduler.Position("job-1"), 1);
  std::string reason = scheduler.PendingReasons(registry, kT0)["job-1"];
  EXPECT_TRUE(Has(reason, "waiting for 3 free healthy CPU workers (3 registered, 2 free)"))
      << reason;
  registry.Release(busy, "job-0", /*confirmed_idle=*/true);
  EXPECT_TRUE(Has(scheduler.PendingReasons(registry, kT0)["job-1"], "starting at the next"));
  std::vector<Placement> placed = scheduler.Schedule(registry, kT0);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].worker_ids.size(), 3u);
  EXPECT_EQ(placed[0].worker_ids[0], a);  // oldest registration first
  EXPECT_EQ(scheduler.Position("job-1"), 0);
  EXPECT_TRUE(scheduler.empty());
}

TEST(Scheduler, DeviceKindUnhealthyAndBusyWorkersAreSkipped) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler;
  std::string gpu = registry.Register("h:1", Device(v1::CUDA), kT0);
  std::string sick = registry.Register("h:2", Device(v1::CPU), kT0);
  std::string busy = registry.Register("h:3", Device(v1::CPU), kT0);
  ASSERT_TRUE(registry.Heartbeat(sick, false, "cuda fault", kT0).ok());
  registry.Assign(busy, "job-0");
  scheduler.Enqueue("job-1", Spec(1), kT0);
  scheduler.Enqueue("job-2", Spec(1, v1::CUDA), kT0);
  std::vector<Placement> placed = scheduler.Schedule(registry, kT0);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-2");
  EXPECT_EQ(placed[0].worker_ids[0], gpu);
  registry.Release(busy, "job-0", /*confirmed_idle=*/true);
  placed = scheduler.Schedule(registry, kT0);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].worker_ids[0], busy);
}

TEST(Scheduler, AJobThatCanNeverFitDoesNotBlockTheQueue) {
  // 1000 ranks with 2 workers registered once kept a 1-rank job behind it
  // waiting forever.
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::ZeroDuration());  // even with the strictest bound
  registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Register("h:2", Device(v1::CPU), kT0);
  scheduler.Enqueue("huge", Spec(1000), kT0);
  scheduler.Enqueue("small", Spec(1), kT0);
  const absl::Time later = kT0 + absl::Hours(1);
  std::vector<Placement> placed = scheduler.Schedule(registry, later);
  ASSERT_EQ(Started(placed), std::vector<std::string>{"small"});
  registry.Assign(placed[0].worker_ids[0], "small");
  EXPECT_EQ(scheduler.Position("huge"), 1);
  std::string reason = scheduler.PendingReasons(registry, later)["huge"];
  EXPECT_TRUE(Has(reason, "waiting for 1000 healthy CPU workers to register: 2 registered"))
      << reason;
  // It is not failed: once enough workers join, it starts.
  for (int i = 3; i <= 1000; ++i) registry.Register("h:" + std::to_string(i), Device(v1::CPU), kT0);
  EXPECT_TRUE(scheduler.Schedule(registry, later).empty());  // "small" still holds one
  EXPECT_TRUE(Has(scheduler.PendingReasons(registry, later)["huge"], "999 free"));
  registry.Register("h:1001", Device(v1::CPU), kT0);
  EXPECT_EQ(Started(scheduler.Schedule(registry, later)), std::vector<std::string>{"huge"});
}

TEST(Scheduler, BackfillsSmallJobsPastOneThatDoesNotFitYet) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::Minutes(5));
  for (int i = 0; i < 4; ++i) registry.Register("h:" + std::to_string(i), Device(v1::CPU), kT0);
  registry.Assign(registry.FreeWorkers(v1::CPU)[0], "job-0");  // 3 of 4 free
  scheduler.Enqueue("big", Spec(4), kT0);
  scheduler.Enqueue("small-1", Spec(1), kT0);
  scheduler.Enqueue("small-2", Spec(2), kT0);
  scheduler.Enqueue("small-3", Spec(1), kT0);
  std::map<std::string, std::string> reasons = scheduler.PendingReasons(registry, kT0);
  EXPECT_TRUE(Has(reasons["big"], "jobs behind it that fit may start first")) << reasons["big"];
  EXPECT_EQ(Started(scheduler.Schedule(registry, kT0)),
            (std::vector<std::string>{"small-1", "small-2"}));
  EXPECT_EQ(scheduler.Position("big"), 1);
  EXPECT_EQ(scheduler.Position("small-3"), 2);
}

TEST(Scheduler, ALongWaitingJobHoldsItsKindUntilItStarts) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::Minutes(5));
  std::vector<std::string> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(registry.Register("h:" + std::to_string(i), Device(v1::CPU), kT0));
  }
  std::string gpu = registry.Register("g:0", Device(v1::CUDA), kT0);
  registry.Assign(workers[0], "job-0");
  scheduler.Enqueue("big", Spec(2), kT0);
  scheduler.Enqueue("small", Spec(1), kT0 + absl::Minutes(1));
  scheduler.Enqueue("gpu", Spec(1, v1::CUDA), kT0 + absl::Minutes(1));

  // Past the bound, "big" holds the CPU workers: the free one stays free for
  // it and "small" waits, naming why; the CUDA job is unaffected.
  const absl::Time late = kT0 + absl::Minutes(6);
  std::map<std::string, std::string> reasons = scheduler.PendingReasons(registry, late);
  EXPECT_TRUE(Has(reasons["big"], "so jobs behind it of kind CPU wait until it starts"))
      << reasons["big"];
  EXPECT_TRUE(Has(reasons["small"], "waiting behind big")) << reasons["small"];
  EXPECT_EQ(Started(scheduler.Schedule(registry, late)), std::vector<std::string>{"gpu"});
  EXPECT_TRUE(registry.FreeWorkers(v1::CPU).size() == 1u);
  registry.Release(workers[0], "job-0", /*confirmed_idle=*/true);
  EXPECT_EQ(Started(scheduler.Schedule(registry, late)), std::vector<std::string>{"big"});
  (void)gpu;
}

TEST(Scheduler, BeforeTheBoundSmallJobsBackfill) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::Minutes(5));
  std::string a = registry.Register("h:0", Device(v1::CPU), kT0);
  registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Assign(a, "job-0");
  scheduler.Enqueue("big", Spec(2), kT0);
  scheduler.Enqueue("small", Spec(1), kT0);
  EXPECT_EQ(Started(scheduler.Schedule(registry, kT0 + absl::Minutes(4))),
            std::vector<std::string>{"small"});
}

TEST(WorkerRegistry, SweepRemovesSilentWorkersAndReportsTheirJob) {
  WorkerRegistry registry(absl::Seconds(5));
  std::string a = registry.Register("h:1", Device(v1::CPU), kT0);
  std::string b = registry.Register("h:2", Device(v1::CPU), kT0);
  registry.Assign(b, "job-7");
  ASSERT_TRUE(registry.Heartbeat(a, true, "", kT0 + absl::Seconds(4)).ok());
  auto lost = registry.Sweep(kT0 + absl::Seconds(6));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker_id, b);
  EXPECT_EQ(lost[0].job_id, "job-7");
  EXPECT_NE(lost[0].reason.find("no heartbeat"), std::string::npos);
  EXPECT_EQ(registry.Heartbeat(b, true, "", kT0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.List().size(), 1u);
}

TEST(WorkerRegistry, CountsHealthyWorkersPerKind) {
  WorkerRegistry registry(absl::Seconds(5));
  std::string a = registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Register("h:2", Device(v1::CPU), kT0);
  registry.Register("g:1", Device(v1::CUDA), kT0);
  ASSERT_TRUE(registry.Heartbeat(a, false, "sticky fault", kT0).ok());
  EXPECT_EQ(registry.CountWorkers(v1::CPU), 2);
  EXPECT_EQ(registry.CountHealthyWorkers(v1::CPU), 1);
  EXPECT_EQ(registry.CountHealthyWorkers(v1::CUDA), 1);
}

TEST(Scheduler, ARestartingJobGoesFirstAndHoldsItsKindUntilItsGangIsFree) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::Minutes(5));
  std::string a = registry.Register("h:0", Device(v1::CPU), kT0);
  registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Assign(a, "other");
  scheduler.Enqueue("small", Spec(1), kT0);
  scheduler.EnqueueRestart("restarting", Spec(2), kT0 + absl::Seconds(1));
  EXPECT_EQ(scheduler.Position("restarting"), 1);
  // One worker is free: the 1-rank job could backfill, but the restarting
  // job holds the CPU workers for itself.
  EXPECT_TRUE(scheduler.Schedule(registry, kT0 + absl::Seconds(2)).empty());
  EXPECT_TRUE(Has(scheduler.PendingReasons(registry, kT0)["restarting"], "restarting"));
  registry.Release(a, "other", /*confirmed_idle=*/true);
  EXPECT_EQ(Started(scheduler.Schedule(registry, kT0 + absl::Seconds(3))),
            std::vector<std::string>{"restarting"});
}

TEST(Scheduler, ARestartingJobThatCannotRunDoesNotBlockOthers) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler(absl::Minutes(5));
  registry.Register("h:0", Device(v1::CPU), kT0);
  scheduler.EnqueueRestart("restarting", Spec(2), kT0);  // only one worker registered
  scheduler.Enqueue("small", Spec(1), kT0);
  EXPECT_EQ(Started(scheduler.Schedule(registry, kT0)), std::vector<std::string>{"small"});
}

TEST(WorkerRegistry, AWorkerReportingAJobItWasNotAssignedIsNotFreeUntilItReportsIdle) {
  WorkerRegistry registry(absl::Seconds(5));
  v1::WorkerActivity holding;
  holding.set_job_id("job-1");
  holding.set_phase("running");
  // Re-registered after SIGCONT (or a coordinator restart) still holding job-1.
  std::string w = registry.Register("h:1", Device(v1::CPU), kT0, holding);
  EXPECT_TRUE(registry.FreeWorkers(v1::CPU).empty());
  EXPECT_EQ(registry.OrphanJob(w), "job-1");
  ASSERT_TRUE(registry.Heartbeat(w, true, "", kT0, holding).ok());
  EXPECT_TRUE(registry.FreeWorkers(v1::CPU).empty());
  ASSERT_TRUE(registry.Heartbeat(w, true, "", kT0, v1::WorkerActivity()).ok());
  EXPECT_EQ(registry.FreeWorkers(v1::CPU), std::vector<std::string>{w});
  EXPECT_EQ(registry.OrphanJob(w), "");
}

TEST(WorkerRegistry, ReleaseWithoutAnAcknowledgedAbortKeepsTheWorkerOutOfThePool) {
  WorkerRegistry registry(absl::Seconds(5));
  std::string acked = registry.Register("h:1", Device(v1::CPU), kT0);
  std::string silent = registry.Register("h:2", Device(v1::CPU), kT0);
  registry.Assign(acked, "job-1");
  registry.Assign(silent, "job-1");
  v1::WorkerActivity running;
  running.set_job_id("job-1");
  ASSERT_TRUE(registry.Heartbeat(acked, true, "", kT0, running).ok());
  // `silent` last reported idle (before SetupJob); its Abort timed out.
  registry.Release(acked, "job-1", /*confirmed_idle=*/true);
  registry.Release(silent, "job-1", /*confirmed_idle=*/false);
  EXPECT_EQ(registry.FreeWorkers(v1::CPU), std::vector<std::string>{acked});
  EXPECT_EQ(registry.OrphanJob(silent), "job-1");
  ASSERT_TRUE(registry.Heartbeat(silent, true, "", kT0, v1::WorkerActivity()).ok());
  EXPECT_EQ(registry.FreeWorkers(v1::CPU).size(), 2u);
}

TEST(WorkerRegistry, AWorkerRunningItsAssignedJobIsNotAnOrphan) {
  WorkerRegistry registry(absl::Seconds(5));
  std::string w = registry.Register("h:1", Device(v1::CPU), kT0);
  registry.Assign(w, "job-4");
  v1::WorkerActivity running;
  running.set_job_id("job-4");
  ASSERT_TRUE(registry.Heartbeat(w, true, "", kT0, running).ok());
  EXPECT_EQ(registry.OrphanJob(w), "");
  EXPECT_EQ(registry.Find(w)->activity().job_id(), "job-4");
}

TEST(WorkerRegistry, MarkLostForgetsTheWorkerUntilItRegistersAgain) {
  WorkerRegistry registry(absl::Seconds(5));
  std::string w = registry.Register("h:1", Device(v1::CPU), kT0);
  registry.MarkLost(w);
  EXPECT_TRUE(registry.FreeWorkers(v1::CPU).empty());
  EXPECT_EQ(registry.Heartbeat(w, true, "", kT0).code(), absl::StatusCode::kNotFound);
  registry.MarkLost("w-unknown");  // no-op
  EXPECT_TRUE(registry.Sweep(kT0 + absl::Minutes(1)).empty());
}

TEST(WorkerRegistry, AHeartbeatFromAnotherAddressUnderAReusedIdMustRegisterAgain) {
  // After a coordinator restart ids start again at w-1: the first worker to
  // re-register gets w-1, and another worker still heartbeating as w-1 must
  // not be taken for it.
  WorkerRegistry registry(absl::Seconds(5));
  std::string id = registry.Register("h:2", Device(v1::CPU), kT0);
  absl::Status other = registry.Heartbeat(id, true, "", kT0, {}, "h:1");
  EXPECT_EQ(other.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(other.message().find("registered from h:2, not h:1"), std::string::npos) << other;
  EXPECT_TRUE(registry.Heartbeat(id, true, "", kT0, {}, "h:2").ok());
  EXPECT_TRUE(registry.Heartbeat(id, true, "", kT0).ok());  // no address: not checked
}

}  // namespace
}  // namespace tessera

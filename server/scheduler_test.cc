// FIFO gang scheduling over a real WorkerRegistry: gangs, device kinds,
// unhealthy and busy workers, strict FIFO, reasons and liveness sweeps.
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

TEST(Scheduler, PlacesAGangOnlyWhenEnoughFreeWorkersExist) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler;
  std::string a = registry.Register("h:1", Device(v1::CPU), kT0);
  scheduler.Enqueue("job-1");
  EXPECT_FALSE(scheduler.TryPlaceHead("job-1", Spec(2), registry).has_value());
  EXPECT_EQ(scheduler.Position("job-1"), 1);
  std::string reason = Scheduler::PendingReason(Spec(2), registry, 1);
  EXPECT_NE(reason.find("2 free healthy CPU workers"), std::string::npos) << reason;
  EXPECT_NE(reason.find("1 registered"), std::string::npos) << reason;
  std::string b = registry.Register("h:2", Device(v1::CPU), kT0);
  EXPECT_NE(Scheduler::PendingReason(Spec(2), registry, 1).find("starting at the next"),
            std::string::npos);
  auto placement = scheduler.TryPlaceHead("job-1", Spec(2), registry);
  ASSERT_TRUE(placement.has_value());
  EXPECT_EQ(placement->worker_ids, (std::vector<std::string>{a, b}));
  EXPECT_EQ(scheduler.Position("job-1"), 0);
}

TEST(Scheduler, DeviceKindUnhealthyAndBusyWorkersAreSkipped) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler;
  std::string gpu = registry.Register("h:1", Device(v1::CUDA), kT0);
  std::string sick = registry.Register("h:2", Device(v1::CPU), kT0);
  std::string busy = registry.Register("h:3", Device(v1::CPU), kT0);
  ASSERT_TRUE(registry.Heartbeat(sick, false, "cuda fault", kT0).ok());
  registry.Assign(busy, "job-0");
  scheduler.Enqueue("job-1");
  EXPECT_FALSE(scheduler.TryPlaceHead("job-1", Spec(1), registry).has_value());
  registry.Release(busy, "job-0");
  auto placement = scheduler.TryPlaceHead("job-1", Spec(1), registry);
  ASSERT_TRUE(placement.has_value());
  EXPECT_EQ(placement->worker_ids[0], busy);
  scheduler.Enqueue("job-2");
  auto on_gpu = scheduler.TryPlaceHead("job-2", Spec(1, v1::CUDA), registry);
  ASSERT_TRUE(on_gpu.has_value());
  EXPECT_EQ(on_gpu->worker_ids[0], gpu);
}

TEST(Scheduler, StrictFifoOnlyPlacesTheHead) {
  WorkerRegistry registry(absl::Seconds(5));
  Scheduler scheduler;
  registry.Register("h:1", Device(v1::CPU), kT0);
  scheduler.Enqueue("big");
  scheduler.Enqueue("small");
  EXPECT_FALSE(scheduler.TryPlaceHead("small", Spec(1), registry).has_value());
  EXPECT_EQ(scheduler.Position("small"), 2);
  std::string reason = Scheduler::PendingReason(Spec(1), registry, 2);
  EXPECT_NE(reason.find("1 job(s) ahead"), std::string::npos) << reason;
  scheduler.Remove("big");
  EXPECT_TRUE(scheduler.TryPlaceHead("small", Spec(1), registry).has_value());
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

}  // namespace
}  // namespace tessera

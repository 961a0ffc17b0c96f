// Submit-time memory admission (the estimate itself is common/memory_estimate,
// which worker/trainer/fsdp_trainer_test holds to the bytes the trainer
// allocates): a job no registered worker of its kind could hold is
// refused with RESOURCE_EXHAUSTED naming the estimate and the memory
// available, while unknown sizes, other kinds, unhealthy workers and an
// empty registry do not refuse; and the coordinator refuses such a job
// before queueing it.
#include "server/memory_admission.h"

#include <memory>
#include <string>
#include <vector>

#include "common/memory_estimate.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"
#include "server/spec_validation.h"

namespace tessera {
namespace {

v1::JobSpec Spec(int world) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(1000);
  m->set_d_model(96);
  m->set_n_layers(3);
  m->set_n_heads(4);
  m->set_ffn_dim(250);
  m->set_seq_len(24);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY);
  spec.mutable_data()->set_micro_batch_size(3);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(world);
  spec.set_steps(5);
  return WithDefaults(spec);
}

v1::WorkerRecord Worker(const std::string& id, v1::DeviceKind kind, int64_t memory,
                        bool healthy = true) {
  v1::WorkerRecord w;
  w.set_worker_id(id);
  w.mutable_device()->set_kind(kind);
  w.mutable_device()->set_memory_bytes(memory);
  w.set_healthy(healthy);
  return w;
}

TEST(MemoryAdmission, RefusesWhenNoWorkerOfTheKindHasTheMemoryAndSaysHowMuch) {
  const v1::JobSpec spec = Spec(2);
  const int64_t need = EstimateRankMemory(spec, 0, 2).total();
  const absl::Status refused = CheckJobFitsRegisteredWorkers(
      spec, {Worker("w-1", v1::CPU, need / 4), Worker("w-2", v1::CPU, need - 1)});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  const std::string message(refused.message());
  EXPECT_NE(message.find("model: does not fit the registered CPU workers"), std::string::npos)
      << message;
  EXPECT_NE(message.find("each rank needs about " + EstimateRankMemory(spec, 0, 2).ToString()),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(std::to_string(need) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("largest CPU worker (w-2) has"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(need - 1) + " bytes"), std::string::npos) << message;

  // One worker with exactly enough is enough to admit it.
  EXPECT_TRUE(CheckJobFitsRegisteredWorkers(
                  spec, {Worker("w-1", v1::CPU, need / 4), Worker("w-3", v1::CPU, need)})
                  .ok());
}

TEST(MemoryAdmission, JudgesOnlyWhatIsKnown) {
  const v1::JobSpec spec = Spec(2);
  const int64_t need = EstimateRankMemory(spec, 0, 2).total();
  // Nothing registered yet, or only other kinds: workers may still join.
  EXPECT_TRUE(CheckJobFitsRegisteredWorkers(spec, {}).ok());
  EXPECT_TRUE(CheckJobFitsRegisteredWorkers(spec, {Worker("g-1", v1::CUDA, 1)}).ok());
  // An unhealthy worker is not counted, big or small.
  EXPECT_TRUE(CheckJobFitsRegisteredWorkers(spec, {Worker("w-1", v1::CPU, 1, false)}).ok());
  EXPECT_EQ(CheckJobFitsRegisteredWorkers(
                spec, {Worker("w-1", v1::CPU, need * 2, false), Worker("w-2", v1::CPU, 1)})
                .code(),
            absl::StatusCode::kResourceExhausted);
  // A worker that reports no size might fit.
  EXPECT_TRUE(
      CheckJobFitsRegisteredWorkers(spec, {Worker("w-1", v1::CPU, 1), Worker("w-2", v1::CPU, 0)})
          .ok());
}

TEST(MemoryAdmission, TheCoordinatorRefusesBeforeQueueing) {
  CoordinatorOptions options;
  options.start_background_thread = false;
  options.connect = FakeWorkerConnector();
  Coordinator core(options);
  ASSERT_TRUE(core.Start().ok());
  const v1::JobSpec spec = Spec(1);
  const int64_t need = EstimateRankMemory(spec, 0, 1).total();
  v1::RegisterWorkerRequest small;
  small.set_address("127.0.0.1:1");
  small.mutable_device()->set_kind(v1::CPU);
  small.mutable_device()->set_memory_bytes(need / 2);
  ASSERT_TRUE(core.RegisterWorker(small).ok());

  absl::StatusOr<v1::Job> refused = core.SubmitJob(spec);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("each rank needs about"), std::string::npos);
  EXPECT_TRUE(core.ListJobs({}, 0, "")->jobs.empty());  // nothing was queued

  v1::RegisterWorkerRequest big = small;
  big.set_address("127.0.0.1:2");
  big.mutable_device()->set_memory_bytes(need * 2);
  ASSERT_TRUE(core.RegisterWorker(big).ok());
  absl::StatusOr<v1::Job> admitted = core.SubmitJob(spec);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->state(), v1::PENDING);
}

}  // namespace
}  // namespace tessera

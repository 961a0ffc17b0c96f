// A full training step on one GPU against the CPU reference engine: the same
// spec, seed and data give the same losses for the first steps within a
// stated tolerance (the engines differ only in summation order and
// atomics), and no engine allocation happens after setup. The job
// (test_job_spec.h) has head dim 64 and runs with grouped-query attention
// (2 query heads sharing 1 key/value head) and with multi-head attention,
// each with FP8 on and off. Needs a GPU.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/engine/cuda/nccl_communicator.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

std::vector<float> Losses(Trainer& trainer, const v1::JobSpec& spec, int steps) {
  std::vector<float> losses;
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  absl::Status s = trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(60));
  EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < steps; ++i) {
    auto r = trainer.RunStep(i);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    losses.push_back(r->loss);
  }
  return losses;
}

TEST(FsdpTrainerGpu, OneGpuStepMatchesTheCpuEngine) {
  for (int kv_heads : {1, 2}) {
    for (bool fp8 : {true, false}) {
      SCOPED_TRACE(absl::StrCat("n_kv_heads=", kv_heads, " fp8=", fp8));
      v1::JobSpec spec = TestJobSpec(4);
      spec.mutable_model()->set_n_kv_heads(kv_heads);
      spec.mutable_fp8()->set_disabled(!fp8);
      FsdpTrainer cpu(CreateCpuOps(), CreateGlooCommunicator);
      auto ops = CreateCudaOps(0);
      ASSERT_TRUE(ops.ok()) << ops.status();
      FsdpTrainer gpu(std::move(*ops), [](RendezvousStore* store, int rank, int world,
                                          const std::string&, absl::Duration timeout) {
        return CreateNcclCommunicator(store, rank, world, 0, timeout);
      });
      const int steps = 8;
      std::vector<float> want = Losses(cpu, spec, steps);
      const int64_t allocations = gpu.allocation_count();
      std::vector<float> got = Losses(gpu, spec, steps);
      ASSERT_EQ(got.size(), want.size());
      for (int i = 0; i < steps; ++i) {
        printf("n_kv_heads=%d fp8=%d step %d cpu %.6f gpu %.6f\n", kv_heads, fp8, i, want[i],
               got[i]);
        EXPECT_NEAR(got[i], want[i], (i == 0 ? 2e-3 : 2e-2) * want[i]) << "step " << i;
      }
      EXPECT_GT(gpu.allocation_count(), allocations);
      const int64_t after_setup = gpu.allocation_count();
      ASSERT_TRUE(gpu.RunStep(steps).ok());
      EXPECT_EQ(gpu.allocation_count(), after_setup);
    }
  }
}

}  // namespace
}  // namespace tessera

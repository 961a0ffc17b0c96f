// The FsdpTrainer the GPU tests train: the CUDA engine on `device` (0 for
// one-rank tests; a multi-GPU test's rank r uses device r) with `options`
// (default: deterministic GEMM algorithms), with NCCL for the collectives of
// multi-rank jobs. Null, with a test failure recorded,
// when the engine cannot start (no such device).
#ifndef TESSERA_WORKER_TRAINER_GPU_TRAINER_FOR_TEST_H_
#define TESSERA_WORKER_TRAINER_GPU_TRAINER_FOR_TEST_H_

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/engine/cuda/nccl_communicator.h"
#include "worker/trainer/fsdp_trainer.h"

namespace tessera {

inline std::unique_ptr<FsdpTrainer> GpuTrainerForTest(int device = 0,
                                                      const CudaEngineOptions& options = {}) {
  auto ops = CreateCudaOps(device, options);
  EXPECT_TRUE(ops.ok()) << ops.status();
  if (!ops.ok()) return nullptr;
  return std::make_unique<FsdpTrainer>(
      std::move(*ops), [device](RendezvousStore* store, int rank, int world, const std::string&,
                                absl::Duration timeout) {
        return CreateNcclCommunicator(store, rank, world, device, timeout);
      });
}

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_GPU_TRAINER_FOR_TEST_H_

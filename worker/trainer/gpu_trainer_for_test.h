// The FsdpTrainer the GPU tests train: the CUDA engine on device 0, with NCCL
// for the collectives of multi-rank jobs. Null, with a test failure
// recorded, when the engine cannot start (no device).
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

inline std::unique_ptr<FsdpTrainer> GpuTrainerForTest() {
  auto ops = CreateCudaOps(0);
  EXPECT_TRUE(ops.ok()) << ops.status();
  if (!ops.ok()) return nullptr;
  return std::make_unique<FsdpTrainer>(
      std::move(*ops), [](RendezvousStore* store, int rank, int world, const std::string&,
                          absl::Duration timeout) {
        return CreateNcclCommunicator(store, rank, world, 0, timeout);
      });
}

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_GPU_TRAINER_FOR_TEST_H_

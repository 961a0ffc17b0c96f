// Chooses the compute engine for a worker's device and describes the device
// for registration. "cpu" gives the FSDP2 trainer over the CPU reference
// engine and Gloo; "cuda:N" the same trainer over the CUDA engine and NCCL.
#ifndef TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_
#define TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/worker.pb.h"
#include "worker/trainer/trainer.h"

namespace tessera {

// INVALID_ARGUMENT for a malformed device string; NOT_FOUND / UNAVAILABLE
// when a CUDA device is absent.
absl::StatusOr<v1::DeviceInfo> DescribeDevice(const std::string& device);

// A fresh trainer for one job on `device`. Called on the worker's compute
// thread, which then runs every call of that trainer (so a CUDA trainer sets
// its device once for that thread).
absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const std::string& device);

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_

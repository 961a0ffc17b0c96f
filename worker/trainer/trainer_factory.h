// Chooses the compute engine for a worker's device and describes the device
// for registration. "cpu" gives the FSDP2 trainer over the CPU reference
// engine and Gloo; "cuda:N" the same trainer over the CUDA engine and NCCL,
// with the engine options the job asks for (EngineOptionsFor).
#ifndef TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_
#define TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"
#include "proto/tessera/v1/worker.pb.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/trainer/trainer.h"

namespace tessera {

// INVALID_ARGUMENT for a malformed device string; NOT_FOUND / UNAVAILABLE
// when a CUDA device is absent.
absl::StatusOr<v1::DeviceInfo> DescribeDevice(const std::string& device);

// The CUDA engine options a job asks for: GEMM algorithms timed only when
// spec.nondeterministic_gemm_tuning is set; attention kernels from
// spec.attention_kernels (AUTO, the default: the engine's rule,
// AutoAttentionPicksCudnn) with the atomic backward only when
// spec.nondeterministic_attention_backward is set; everything else at its
// default.
CudaEngineOptions EngineOptionsFor(const v1::JobSpec& spec);

// A fresh trainer for the job `spec` on `device` (one engine per job, so
// the engine's options are the job's). Called on the worker's compute
// thread, which then runs every call of that trainer (so a CUDA trainer sets
// its device once for that thread). The spec is read here only for
// EngineOptionsFor; Trainer::Setup still receives it.
// `data_trace_dir`: where each rank traces the training sequences it reads
// (FsdpTrainer::set_data_trace_dir); empty for none.
absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const std::string& device,
                                                       const v1::JobSpec& spec,
                                                       const std::string& data_trace_dir = "");

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_TRAINER_FACTORY_H_

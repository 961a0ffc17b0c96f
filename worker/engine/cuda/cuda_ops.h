// The CUDA engine for Hopper: the Ops interface (worker/ops/ops.h) over the
// kernels in this directory and cuBLASLt, with the same semantics as the CPU
// reference engine.
//
// Host-side discipline: CreateCudaOps sets the device for the calling thread
// (the worker's compute thread, which makes every later call) and queries the
// device properties once; the cuBLASLt handle, its workspace and every GEMM
// plan are created once; scratch for attention backward and the fused loss
// is allocated on first use for a shape and reused. Memory comes from
// cudaMalloc at setup only. Bad token ids or targets raise a device flag
// that the next Synchronize reports as INVALID_ARGUMENT; CUDA failures come
// back as INTERNAL (sticky) or RESOURCE_EXHAUSTED.
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/worker.pb.h"
#include "worker/ops/ops.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index);

// Name, memory and host of GPU `index`; NOT_FOUND if there is no such GPU.
absl::StatusOr<v1::DeviceInfo> DescribeCudaDevice(int index);

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_

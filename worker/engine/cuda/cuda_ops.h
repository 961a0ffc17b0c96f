// The CUDA engine for Hopper: the Ops interface (worker/ops/ops.h) over the
// kernels in this directory and cuBLASLt, with the same semantics as the CPU
// reference engine (worker/engine/cpu).
//
// Host-side discipline: CreateCudaOps builds the DeviceContext (device facts
// queried once, the cuBLASLt handle and its one workspace, the device error
// flag) and every op first makes its device current for the calling thread
// (a thread_local check; cudaSetDevice runs once per thread). GEMM plans are
// built once per shape; scratch for attention backward and the fused loss
// is allocated on the first call for a shape and reused. Memory comes from
// cudaMalloc at setup only. Nothing on the step path reads back to the
// host: bad token ids or targets raise the device flag, which the next
// Synchronize reports as INVALID_ARGUMENT. CUDA failures come back through
// cuda_check.h (sticky ones as INTERNAL, out-of-memory as RESOURCE_EXHAUSTED).
#ifndef TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_
#define TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/cuda/describe_device.h"  // DescribeCudaDevice, for callers
#include "worker/ops/ops.h"

namespace tessera {

// The engine for GPU `device_index`; NOT_FOUND if there is no such GPU.
absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index);
// The same with a cuBLASLt workspace of `cublaslt_workspace_bytes` instead
// of the default (benchmarks compare sizes).
absl::StatusOr<std::unique_ptr<Ops>> CreateCudaOps(int device_index,
                                                   size_t cublaslt_workspace_bytes);

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_CUDA_OPS_H_

// Token embedding on the GPU. Forward gathers table rows; an id outside
// [0, V) writes a zero row and raises the device error flag (reported as
// INVALID_ARGUMENT at the next Synchronize). Backward scatter-adds gradient
// rows into the fp32 table gradient with atomicAdd: the sum is exact up to
// fp32 rounding but its order (and so the last bits) may vary run to run.

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void EmbeddingForwardKernel(const int32_t* ids, const void* table, int table_dtype,
                                       void* out, int out_dtype, int64_t vocab, int64_t h,
                                       int* error_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  if (!ok && threadIdx.x == 0) atomicExch(error_flag, 1);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    StoreF(out, out_dtype, t * h + j, ok ? LoadF(table, table_dtype, id * h + j) : 0.f);
  }
}

__global__ void EmbeddingBackwardKernel(const int32_t* ids, const void* grad_out, int grad_dtype,
                                        float* grad_table, int64_t vocab, int64_t h,
                                        int* error_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) atomicExch(error_flag, 1);
    return;
  }
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    atomicAdd(grad_table + id * h + j, LoadF(grad_out, grad_dtype, t * h + j));
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchEmbeddingForward(const TensorDesc& ids, const TensorDesc& table,
                                    const TensorDesc& out, int* error_flag, cudaStream_t stream) {
  const int64_t tokens = ids.NumElements();
  if (tokens == 0) return absl::OkStatus();
  EmbeddingForwardKernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(
      static_cast<const int32_t*>(ids.data), table.data, int(table.dtype), out.data,
      int(out.dtype), table.shape[0], table.shape[1], error_flag);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchEmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                                     const TensorDesc& grad_table, int* error_flag,
                                     cudaStream_t stream) {
  const int64_t tokens = ids.NumElements();
  if (tokens == 0) return absl::OkStatus();
  EmbeddingBackwardKernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(
      static_cast<const int32_t*>(ids.data), grad_out.data, int(grad_out.dtype),
      static_cast<float*>(grad_table.data), grad_table.shape[0], grad_table.shape[1], error_flag);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

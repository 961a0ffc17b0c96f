// Elementwise ops on the GPU: out = a + b (residual connections) and casts
// between fp32 and bf16, in fp32 arithmetic rounded to the output dtype.

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void AddKernel(const void* a, int da, const void* b, int db, void* out, int dout,
                          int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    StoreF(out, dout, i, LoadF(a, da, i) + LoadF(b, db, i));
  }
}

__global__ void CastKernel(const void* in, int din, void* out, int dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    StoreF(out, dout, i, LoadF(in, din, i));
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchAdd(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                       cudaStream_t stream) {
  const int64_t n = out.NumElements();
  if (n == 0) return absl::OkStatus();
  AddKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(a.data, int(a.dtype), b.data, int(b.dtype),
                                                  out.data, int(out.dtype), n);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchCast(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream) {
  const int64_t n = out.NumElements();
  if (n == 0) return absl::OkStatus();
  CastKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(in.data, int(in.dtype), out.data,
                                                   int(out.dtype), n);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

// RMSNorm on the GPU, one block per token row, with the CPU reference's
// formulas (rstd = 1/sqrt(mean(x^2) + eps), fp32 arithmetic). The weight
// gradient is accumulated with fp32 atomicAdd across rows.

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void RmsNormForwardKernel(const void* x, int dx, const void* w, int dw, float eps,
                                     void* out, int dout, float* rstd, int64_t h) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = LoadF(x, dx, t * h + j);
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float r = rsqrtf(ss / static_cast<float>(h) + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    StoreF(out, dout, t * h + j, LoadF(x, dx, t * h + j) * r * LoadF(w, dw, j));
  }
}

__global__ void RmsNormBackwardKernel(const void* dy, int ddy, const void* x, int dx_t,
                                      const void* w, int dw_t, const float* rstd, void* dx,
                                      int ddx, int accumulate, float* dw, int64_t h) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float r = rstd[t];
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = LoadF(dy, ddy, t * h + j), xv = LoadF(x, dx_t, t * h + j);
    dot += LoadF(w, dw_t, j) * g * xv;
    atomicAdd(dw + j, g * xv * r);
  }
  dot = BlockSum(dot, scratch);
  const float coef = r * r * r / static_cast<float>(h) * dot;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float v = r * LoadF(w, dw_t, j) * LoadF(dy, ddy, t * h + j) - LoadF(x, dx_t, t * h + j) * coef;
    if (accumulate) v += LoadF(dx, ddx, t * h + j);
    StoreF(dx, ddx, t * h + j, v);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchRmsNormForward(const TensorDesc& x, const TensorDesc& w, float eps,
                                  const TensorDesc& out, const TensorDesc& rstd,
                                  cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  if (t == 0) return absl::OkStatus();
  RmsNormForwardKernel<<<static_cast<unsigned>(t), 256, 0, stream>>>(
      x.data, int(x.dtype), w.data, int(w.dtype), eps, out.data, int(out.dtype),
      static_cast<float*>(rstd.data), h);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchRmsNormBackward(const TensorDesc& dy, const TensorDesc& x, const TensorDesc& w,
                                   const TensorDesc& rstd, const TensorDesc& dx, bool accumulate,
                                   const TensorDesc& dw, cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  if (t == 0) return absl::OkStatus();
  RmsNormBackwardKernel<<<static_cast<unsigned>(t), 256, 0, stream>>>(
      dy.data, int(dy.dtype), x.data, int(x.dtype), w.data, int(w.dtype),
      static_cast<const float*>(rstd.data), dx.data, int(dx.dtype), accumulate ? 1 : 0,
      static_cast<float*>(dw.data), h);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

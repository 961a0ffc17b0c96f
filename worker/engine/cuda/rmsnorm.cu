// RMSNorm on the GPU with the CPU reference's formulas (rstd =
// 1/sqrtf(mean(x^2) + eps), fp32 arithmetic). Forward and grad_x: one block
// per token row. grad_weight: a column sum over rows, done without atomics
// in two fixed-order levels (each block sums kRowsPerPartial rows of 256
// columns into a partial, then one pass adds the partials into grad_weight
// in chunk order), so it is deterministic and free of atomic contention on
// the H addresses.

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int64_t kRowsPerPartial = 64;

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
  const float r = 1.0f / sqrtf(ss / static_cast<float>(h) + eps);  // as the CPU: IEEE sqrt, then divide
  if (threadIdx.x == 0) rstd[t] = r;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    StoreF(out, dout, t * h + j, LoadF(x, dx, t * h + j) * r * LoadF(w, dw, j));
  }
}

__global__ void RmsNormBackwardKernel(const void* dy, int ddy, const void* x, int dx_t,
                                      const void* w, int dw_t, const float* rstd, void* dx,
                                      int ddx, int accumulate, int64_t h) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float r = rstd[t];
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = LoadF(dy, ddy, t * h + j), xv = LoadF(x, dx_t, t * h + j);
    dot += LoadF(w, dw_t, j) * g * xv;
  }
  dot = BlockSum(dot, scratch);
  const float coef = r * r * r / static_cast<float>(h) * dot;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float v = r * LoadF(w, dw_t, j) * LoadF(dy, ddy, t * h + j) - LoadF(x, dx_t, t * h + j) * coef;
    if (accumulate) v += LoadF(dx, ddx, t * h + j);
    StoreF(dx, ddx, t * h + j, v);
  }
}

// partials[chunk, j] = sum over rows of the chunk of dy * x * rstd.
__global__ void RmsNormWeightGradPartialKernel(const void* dy, int ddy, const void* x, int dx_t,
                                               const float* rstd, float* partials, int64_t t,
                                               int64_t h) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  const int64_t row0 = int64_t(blockIdx.y) * kRowsPerPartial;
  const int64_t row_end = min(row0 + kRowsPerPartial, t);
  float acc = 0.f;
  for (int64_t row = row0; row < row_end; ++row) {
    acc += LoadF(dy, ddy, row * h + j) * LoadF(x, dx_t, row * h + j) * rstd[row];
  }
  partials[blockIdx.y * h + j] = acc;
}

// dw[j] += sum over chunks (in chunk order) of partials[chunk, j].
__global__ void RmsNormWeightGradReduceKernel(const float* partials, int64_t chunks, int64_t h,
                                              float* dw) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  float acc = 0.f;
  for (int64_t c = 0; c < chunks; ++c) acc += partials[c * h + j];
  dw[j] += acc;
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

int64_t RmsNormWeightGradScratchFloats(int64_t tokens, int64_t h) {
  return (tokens + kRowsPerPartial - 1) / kRowsPerPartial * h;
}

absl::Status LaunchRmsNormBackward(const TensorDesc& dy, const TensorDesc& x, const TensorDesc& w,
                                   const TensorDesc& rstd, const TensorDesc& dx, bool accumulate,
                                   const TensorDesc& dw, float* scratch, cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  if (t == 0 || h == 0) return absl::OkStatus();
  RmsNormBackwardKernel<<<static_cast<unsigned>(t), 256, 0, stream>>>(
      dy.data, int(dy.dtype), x.data, int(x.dtype), w.data, int(w.dtype),
      static_cast<const float*>(rstd.data), dx.data, int(dx.dtype), accumulate ? 1 : 0, h);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  const int64_t chunks = (t + kRowsPerPartial - 1) / kRowsPerPartial;
  if (chunks > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: ", t, " rows exceed RmsNormBackward's limit of ", 65535 * kRowsPerPartial));
  }
  const unsigned column_blocks = static_cast<unsigned>((h + 255) / 256);
  RmsNormWeightGradPartialKernel<<<dim3(column_blocks, static_cast<unsigned>(chunks)), 256, 0,
                                   stream>>>(dy.data, int(dy.dtype), x.data, int(x.dtype),
                                             static_cast<const float*>(rstd.data), scratch, t, h);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  RmsNormWeightGradReduceKernel<<<column_blocks, 256, 0, stream>>>(scratch, chunks, h,
                                                                  static_cast<float*>(dw.data));
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

// SwiGLU on the GPU with the CPU reference's formulas: gate_up [T, 2F] bf16
// (gate in [0, F), up in [F, 2F)); out = silu(g) * u; backward
// d_g = dy * u * s (1 + g (1 - s)), d_u = dy * silu(g), s = sigmoid(g).

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void SwiGluForwardKernel(const void* gu, int dgu, void* out, int dout, int64_t t,
                                    int64_t f) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < t * f;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / f, j = idx % f;
    const float g = LoadF(gu, dgu, row * 2 * f + j), u = LoadF(gu, dgu, row * 2 * f + f + j);
    StoreF(out, dout, idx, g / (1.0f + expf(-g)) * u);
  }
}

__global__ void SwiGluBackwardKernel(const void* dy, int ddy, const void* gu, int dgu, void* dgu_out,
                                     int dout, int64_t t, int64_t f) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < t * f;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / f, j = idx % f;
    const float g = LoadF(gu, dgu, row * 2 * f + j), u = LoadF(gu, dgu, row * 2 * f + f + j);
    const float d = LoadF(dy, ddy, idx);
    const float sig = 1.0f / (1.0f + expf(-g));
    StoreF(dgu_out, dout, row * 2 * f + j, d * u * sig * (1.0f + g * (1.0f - sig)));
    StoreF(dgu_out, dout, row * 2 * f + f + j, d * g * sig);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchSwiGluForward(const TensorDesc& gate_up, const TensorDesc& out,
                                 cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (t * f == 0) return absl::OkStatus();
  SwiGluForwardKernel<<<BlocksFor(t * f, 256), 256, 0, stream>>>(
      gate_up.data, int(gate_up.dtype), out.data, int(out.dtype), t, f);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchSwiGluBackward(const TensorDesc& dy, const TensorDesc& gate_up,
                                  const TensorDesc& dgu, cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (t * f == 0) return absl::OkStatus();
  SwiGluBackwardKernel<<<BlocksFor(t * f, 256), 256, 0, stream>>>(
      dy.data, int(dy.dtype), gate_up.data, int(gate_up.dtype), dgu.data, int(dgu.dtype), t, f);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

// Rotary embedding on the GPU, in place on the query and key heads (the
// first `rotated_heads` heads) of the packed qkv [B, S, nh + 2 nkv, hd] bf16,
// with the CPU reference's expressions
// (inv_freq = powf(theta, -2i/hd), angle = s * inv_freq, cosf/sinf).
// direction = -1 applies the inverse rotation (the backward).

#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void RopeKernel(__nv_bfloat16* qkv, int64_t tokens, int64_t seq, int64_t heads,
                           int64_t rotated, int64_t hd, float theta, float direction) {
  const int64_t half = hd / 2;
  const int64_t total = tokens * rotated * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % rotated;
    const int64_t token = idx / (half * rotated);
    const int64_t s = token % seq;
    const float inv_freq = powf(theta, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
    const float angle = static_cast<float>(s) * inv_freq;
    const float c = cosf(angle), sn = direction * sinf(angle);
    __nv_bfloat16* row = qkv + (token * heads + h) * hd;
    const float x1 = __bfloat162float(row[i]), x2 = __bfloat162float(row[i + half]);
    row[i] = __float2bfloat16_rn(x1 * c - x2 * sn);
    row[i + half] = __float2bfloat16_rn(x2 * c + x1 * sn);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchRope(const TensorDesc& qkv, int rotated_heads, float theta, float direction,
                        cudaStream_t stream) {
  const int64_t tokens = qkv.shape[0] * qkv.shape[1], s = qkv.shape[1], heads = qkv.shape[2],
                hd = qkv.shape[3];
  const int64_t total = tokens * rotated_heads * (hd / 2);
  if (total == 0) return absl::OkStatus();
  RopeKernel<<<BlocksFor(total, 256), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(qkv.data),
                                                       tokens, s, heads, rotated_heads, hd, theta,
                                                       direction);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

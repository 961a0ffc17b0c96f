// Multi-tensor FusedAdam on the GPU. CudaOps builds, once at setup, a
// device-resident table of every shard of the rank plus a block map (block
// -> shard, element offset; kAdamChunk elements per block). One launch then
// updates all shards: AdamW with bias correction and decoupled weight decay
// on the fp32 master, m and v, writes the e4m3 (or bf16) shard from the new
// master with the shard's scale, and max-combines |master| into its amax.
// Empty shards own no blocks; the whole update is one kernel launch.
// GradSumSquares writes one partial per block and sums them in a fixed
// order (deterministic); ComputeGradScale is one thread.

#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_device.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

// One launch for every shard: block i < num_blocks updates chunk i of its
// shard; block 0 also publishes 1 / scale to every FP8 shard's scale_inv,
// empty shards included (a rank whose shard is empty still multiplies the
// gathered bytes by it). With no elements at all, one block runs for that.
__global__ void FusedAdamKernel(const DeviceAdamShard* table, int num_shards,
                                const int* block_shard, const int64_t* block_offset,
                                int num_blocks, float lr, float beta1, float beta2, float eps,
                                float weight_decay, float bias1, float bias2,
                                const float* grad_scale) {
  __shared__ float scratch[32];
  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < num_shards; i += blockDim.x) {
      if (table[i].is_fp8 && table[i].scale_inv != nullptr) {
        *table[i].scale_inv = 1.0f / *table[i].scale;
      }
    }
  }
  if (static_cast<int>(blockIdx.x) >= num_blocks) return;
  const DeviceAdamShard s = table[block_shard[blockIdx.x]];
  const int64_t begin = block_offset[blockIdx.x];
  const int64_t end = min(begin + kAdamChunk, s.numel);
  const float g_scale = *grad_scale;
  const float scale = s.is_fp8 ? *s.scale : 1.0f;
  float amax = 0.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = s.grad[i] * g_scale;
    const float m = beta1 * s.m[i] + (1.0f - beta1) * g;
    const float v = beta2 * s.v[i] + (1.0f - beta2) * g * g;
    s.m[i] = m;
    s.v[i] = v;
    const float update = (m / bias1) / (sqrtf(v / bias2) + eps);
    float w = s.master[i];
    if (s.decay) w -= lr * weight_decay * w;
    w -= lr * update;
    s.master[i] = w;
    amax = fmaxf(amax, fabsf(w));
    if (s.is_fp8) {
      static_cast<uint8_t*>(s.fp8)[i] = EncodeE4M3(w * scale);
    } else {
      static_cast<__nv_bfloat16*>(s.fp8)[i] = __float2bfloat16_rn(w);
    }
  }
  amax = BlockMax(amax, scratch);
  if (threadIdx.x == 0 && s.amax != nullptr) AtomicMaxNonNegative(s.amax, amax);
}

__global__ void SumSquaresPartialKernel(const DeviceAdamShard* table, const int* block_shard,
                                        const int64_t* block_offset, float* partials) {
  __shared__ float scratch[32];
  const DeviceAdamShard s = table[block_shard[blockIdx.x]];
  const int64_t begin = block_offset[blockIdx.x];
  const int64_t end = min(begin + kAdamChunk, s.numel);
  float acc = 0.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += s.grad[i] * s.grad[i];
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void SumPartialsKernel(const float* partials, int n, float* out) {
  __shared__ float scratch[32];
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

__global__ void GradScaleKernel(const float* sum_sq, const float* tokens, float max_norm,
                                float* grad_norm, float* grad_scale) {
  const float count = fmaxf(*tokens, 1.0f);
  const float norm = sqrtf(*sum_sq) / count;
  *grad_norm = norm;
  float clip = 1.0f;
  if (max_norm > 0.f) clip = fminf(1.0f, max_norm / (norm + 1e-6f));
  *grad_scale = clip / count;
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchFusedAdam(const DeviceAdamShard* table, int num_shards,
                             const int* block_shard, const int64_t* block_offset, int num_blocks,
                             const AdamHyper& hp, const float* grad_scale, cudaStream_t stream) {
  if (num_shards == 0) return absl::OkStatus();
  const float bias1 = 1.0f - powf(hp.beta1, static_cast<float>(hp.step));
  const float bias2 = 1.0f - powf(hp.beta2, static_cast<float>(hp.step));
  FusedAdamKernel<<<max(num_blocks, 1), 256, 0, stream>>>(
      table, num_shards, block_shard, block_offset, num_blocks, hp.lr, hp.beta1, hp.beta2, hp.eps,
      hp.weight_decay, bias1, bias2, grad_scale);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchGradSumSquares(const DeviceAdamShard* table, const int* block_shard,
                                  const int64_t* block_offset, int num_blocks, float* partials,
                                  float* sum_sq, cudaStream_t stream) {
  if (num_blocks > 0) {
    SumSquaresPartialKernel<<<num_blocks, 256, 0, stream>>>(table, block_shard, block_offset,
                                                            partials);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  SumPartialsKernel<<<1, 1024, 0, stream>>>(partials, num_blocks, sum_sq);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchComputeGradScale(const float* sum_sq, const float* tokens, float max_norm,
                                    float* grad_norm, float* grad_scale, cudaStream_t stream) {
  GradScaleKernel<<<1, 1, 0, stream>>>(sum_sq, tokens, max_norm, grad_norm, grad_scale);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

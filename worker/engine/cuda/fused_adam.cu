// Multi-tensor FusedAdam on the GPU. CudaOps builds, once at setup, a
// device-resident table of every shard of the rank plus a block map (block
// -> shard, element offset; kAdamChunk elements per block). One launch then
// updates all shards: AdamW with bias correction and decoupled weight decay
// on the fp32 master, m and v, writes the e4m3 (or bf16) shard from the new
// master with the shard's scale, and max-combines |master| into its amax.
// Empty shards own no blocks; the whole update is one kernel launch.
// GradSumSquares writes one partial per block and sums them in a fixed
// order (deterministic); ComputeGradScale is one thread.
//
// Determinism: the update is elementwise; the block map depends only on the
// shard table; the gradient norm's partials are summed in block order; and
// amax is combined by an atomic maximum, which is the same in any order. So
// an update gives the same bits every run.

#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_device.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

// One element's AdamW step: new m, v and master (in place); returns the
// new master.
struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay, bias1, bias2, g_scale;
  int decay;
  __device__ __forceinline__ float operator()(float grad, float& m, float& v, float w) const {
    const float g = grad * g_scale;
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float update = (m / bias1) / (sqrtf(v / bias2) + eps);
    if (decay) w -= lr * weight_decay * w;
    return w - lr * update;
  }
};

__device__ __forceinline__ bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// One launch for every shard: block i < num_blocks updates chunk i of its
// shard; block 0 also publishes 1 / scale to every FP8 shard's scale_inv,
// empty shards included (a rank whose shard is empty still multiplies the
// gathered bytes by it). With no elements at all, one block runs for that.
// A chunk whose arrays are 16-byte aligned (the usual case: chunks start at
// multiples of kAdamChunk) moves four elements per 16-byte access; the
// rest of it, and unaligned chunks, go one element at a time through the
// same arithmetic.
__global__ void FusedAdamKernel(const DeviceAdamShard* table, int num_shards,
                                const int* block_shard, const int64_t* block_offset,
                                int num_blocks, float lr, float beta1, float beta2, float eps,
                                float weight_decay, float bias1, float bias2,
                                const float* step_values, const float* grad_scale) {
  if (step_values != nullptr) {  // a captured step: this step's values, written before it
    lr = step_values[0];
    bias1 = step_values[1];
    bias2 = step_values[2];
  }
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
  const AdamStep step{lr, beta1, beta2, eps, weight_decay, bias1, bias2, *grad_scale, s.decay};
  const float scale = s.is_fp8 ? *s.scale : 1.0f;
  float amax = 0.f;
  int64_t scalar_begin = begin;
  const bool vector = Aligned(s.master + begin, 16) && Aligned(s.grad + begin, 16) &&
                      Aligned(s.m + begin, 16) && Aligned(s.v + begin, 16) &&
                      (s.is_fp8 ? Aligned(static_cast<uint8_t*>(s.fp8) + begin, 4)
                                : Aligned(static_cast<__nv_bfloat16*>(s.fp8) + begin, 8));
  if (vector) {
    const int64_t quads = (end - begin) / 4;
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const int64_t i = begin + 4 * q;
      const float4 g = *reinterpret_cast<const float4*>(s.grad + i);
      float4 m = *reinterpret_cast<const float4*>(s.m + i);
      float4 v = *reinterpret_cast<const float4*>(s.v + i);
      float4 w = *reinterpret_cast<const float4*>(s.master + i);
      w.x = step(g.x, m.x, v.x, w.x);
      w.y = step(g.y, m.y, v.y, w.y);
      w.z = step(g.z, m.z, v.z, w.z);
      w.w = step(g.w, m.w, v.w, w.w);
      *reinterpret_cast<float4*>(s.m + i) = m;
      *reinterpret_cast<float4*>(s.v + i) = v;
      *reinterpret_cast<float4*>(s.master + i) = w;
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(w.x), fabsf(w.y)), fmaxf(fabsf(w.z), fabsf(w.w))));
      if (s.is_fp8) {
        *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(s.fp8) + i) =
            EncodeFp8x4<false>(w.x * scale, w.y * scale, w.z * scale, w.w * scale);
      } else {
        __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(s.fp8) + i);
        out[0] = __floats2bfloat162_rn(w.x, w.y);
        out[1] = __floats2bfloat162_rn(w.z, w.w);
      }
    }
    scalar_begin = begin + 4 * quads;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
    float m = s.m[i], v = s.v[i];
    const float w = step(s.grad[i], m, v, s.master[i]);
    s.m[i] = m;
    s.v[i] = v;
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
  const AdamStepValues values = StepValuesFor(hp);
  FusedAdamKernel<<<max(num_blocks, 1), 256, 0, stream>>>(
      table, num_shards, block_shard, block_offset, num_blocks, values.lr, hp.beta1, hp.beta2,
      hp.eps, hp.weight_decay, values.bias_correction1, values.bias_correction2, hp.step_values,
      grad_scale);
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

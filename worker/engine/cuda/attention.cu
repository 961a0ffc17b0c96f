// Causal softmax attention on the GPU, simple and exact: one block per
// (query, head, batch). Scores q·k/sqrt(hd) for j <= i live in shared memory
// (so S is limited by shared memory: S <= 8192), the softmax is fp32 with max
// subtraction, and lse is saved for the backward. The backward recomputes P
// from lse; dQ rows are owned by their block, dK and dV are accumulated with
// fp32 atomics into a scratch buffer and converted to bf16 at the end. This
// is O(S^2) memory traffic: the fast tiled kernel is future work.

#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxSeq = 8192;

__device__ __forceinline__ const __nv_bfloat16* Row(const __nv_bfloat16* qkv, int64_t b, int64_t s,
                                                    int part, int64_t h, int64_t seq,
                                                    int64_t heads, int64_t hd) {
  return qkv + (((b * seq + s) * 3 + part) * heads + h) * hd;
}

// ---- kernels ---------------------------------------------------------------

__global__ void AttentionForwardKernel(const __nv_bfloat16* qkv, __nv_bfloat16* out, float* lse,
                                       int64_t seq, int64_t heads, int64_t hd) {
  extern __shared__ float shared[];
  float* q = shared;          // [hd]
  float* p = shared + hd;     // [seq]
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const float scale = rsqrtf(static_cast<float>(hd));
  const __nv_bfloat16* qrow = Row(qkv, b, i, 0, h, seq, heads, hd);
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) q[c] = __bfloat162float(qrow[c]);
  __syncthreads();
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const __nv_bfloat16* k = Row(qkv, b, j, 1, h, seq, heads, hd);
    float s = 0.f;
    for (int64_t c = 0; c < hd; ++c) s += q[c] * __bfloat162float(k[c]);
    p[j] = s * scale;
    m = fmaxf(m, p[j]);
  }
  m = BlockMax(m, scratch);
  float z = 0.f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    p[j] = expf(p[j] - m);
    z += p[j];
  }
  z = BlockSum(z, scratch);
  __syncthreads();
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) {
    float o = 0.f;
    for (int64_t j = 0; j <= i; ++j) o += p[j] * __bfloat162float(Row(qkv, b, j, 2, h, seq, heads, hd)[c]);
    out[((b * seq + i) * heads + h) * hd + c] = __float2bfloat16_rn(o / z);
  }
  if (threadIdx.x == 0) lse[(b * heads + h) * seq + i] = logf(z) + m;
}

__global__ void AttentionBackwardKernel(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                        const __nv_bfloat16* out, const float* lse,
                                        __nv_bfloat16* dqkv, float* dk, float* dv, int64_t seq,
                                        int64_t heads, int64_t hd) {
  extern __shared__ float shared[];
  float* q = shared;            // [hd]
  float* dor = shared + hd;     // [hd]
  float* p = shared + 2 * hd;   // [seq]
  float* ds = p + seq;          // [seq]
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const float scale = rsqrtf(static_cast<float>(hd));
  const int64_t o_off = ((b * seq + i) * heads + h) * hd;
  const __nv_bfloat16* qrow = Row(qkv, b, i, 0, h, seq, heads, hd);
  float d_local = 0.f;
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) {
    q[c] = __bfloat162float(qrow[c]);
    dor[c] = __bfloat162float(dout[o_off + c]);
    d_local += dor[c] * __bfloat162float(out[o_off + c]);
  }
  const float di = BlockSum(d_local, scratch);
  const float l = lse[(b * heads + h) * seq + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const __nv_bfloat16* k = Row(qkv, b, j, 1, h, seq, heads, hd);
    const __nv_bfloat16* v = Row(qkv, b, j, 2, h, seq, heads, hd);
    float s = 0.f, dp = 0.f;
    for (int64_t c = 0; c < hd; ++c) {
      s += q[c] * __bfloat162float(k[c]);
      dp += dor[c] * __bfloat162float(v[c]);
    }
    p[j] = expf(s * scale - l);
    ds[j] = p[j] * (dp - di) * scale;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) {
    float dq = 0.f;
    for (int64_t j = 0; j <= i; ++j) {
      dq += ds[j] * __bfloat162float(Row(qkv, b, j, 1, h, seq, heads, hd)[c]);
      const int64_t kv_off = ((b * seq + j) * heads + h) * hd + c;
      atomicAdd(dk + kv_off, ds[j] * q[c]);
      atomicAdd(dv + kv_off, p[j] * dor[c]);
    }
    dqkv[(((b * seq + i) * 3 + 0) * heads + h) * hd + c] = __float2bfloat16_rn(dq);
  }
}

__global__ void WriteKvGradKernel(const float* dk, const float* dv, __nv_bfloat16* dqkv,
                                  int64_t n_rows, int64_t heads, int64_t hd) {
  const int64_t total = n_rows * heads * hd;  // n_rows = B * S
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = idx % hd, h = (idx / hd) % heads, row = idx / (hd * heads);
    dqkv[((row * 3 + 1) * heads + h) * hd + c] = __float2bfloat16_rn(dk[idx]);
    dqkv[((row * 3 + 2) * heads + h) * hd + c] = __float2bfloat16_rn(dv[idx]);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchAttentionForward(const TensorDesc& qkv, const TensorDesc& out,
                                    const TensorDesc& lse, cudaStream_t stream) {
  const int64_t b = qkv.shape[0], s = qkv.shape[1], nh = qkv.shape[3], hd = qkv.shape[4];
  if (s > kMaxSeq) return absl::InvalidArgumentError("qkv: sequence longer than 8192");
  if (b * s * nh == 0) return absl::OkStatus();
  dim3 grid(static_cast<unsigned>(s), static_cast<unsigned>(nh), static_cast<unsigned>(b));
  const size_t smem = (hd + s) * sizeof(float);
  AttentionForwardKernel<<<grid, kThreads, smem, stream>>>(
      static_cast<const __nv_bfloat16*>(qkv.data), static_cast<__nv_bfloat16*>(out.data),
      static_cast<float*>(lse.data), s, nh, hd);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchAttentionBackward(const TensorDesc& dout, const TensorDesc& qkv,
                                     const TensorDesc& out, const TensorDesc& lse,
                                     const TensorDesc& dqkv, float* scratch, cudaStream_t stream) {
  const int64_t b = qkv.shape[0], s = qkv.shape[1], nh = qkv.shape[3], hd = qkv.shape[4];
  if (s > kMaxSeq / 2) return absl::InvalidArgumentError("qkv: sequence longer than 4096");
  const int64_t n = b * s * nh * hd;
  if (n == 0) return absl::OkStatus();
  float* dk = scratch;
  float* dv = scratch + n;
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, 2 * n * sizeof(float), stream));
  dim3 grid(static_cast<unsigned>(s), static_cast<unsigned>(nh), static_cast<unsigned>(b));
  const size_t smem = (2 * hd + 2 * s) * sizeof(float);
  AttentionBackwardKernel<<<grid, kThreads, smem, stream>>>(
      static_cast<const __nv_bfloat16*>(dout.data), static_cast<const __nv_bfloat16*>(qkv.data),
      static_cast<const __nv_bfloat16*>(out.data), static_cast<const float*>(lse.data),
      static_cast<__nv_bfloat16*>(dqkv.data), dk, dv, s, nh, hd);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  WriteKvGradKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(dk, dv,
                                                          static_cast<__nv_bfloat16*>(dqkv.data),
                                                          b * s, nh, hd);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

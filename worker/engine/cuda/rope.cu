// Rotary embedding on the GPU, in place on the query and key heads (the
// first `rotated_heads` heads) of the packed qkv [B, S, nh + 2 nkv, hd] bf16,
// with the CPU reference's expressions
// (inv_freq = powf(theta, -2i/hd), angle = s * inv_freq, cosf/sinf).
// direction = -1 applies the inverse rotation (the backward).
//
// The op is memory-bound once the trigonometry is shared: the fast path
// (head_dim/2 a multiple of 8, qkv 16-byte aligned) gives each thread 8
// frequencies of one token and up to 8 heads, so powf/cosf/sinf run once per
// (token, frequency, 8 heads) and every access is a 16-byte vector. Other
// shapes take the general kernel, one (token, head, frequency) per thread.
// Both evaluate the same fp32 expressions and round once to bf16.
//
// Determinism: no reductions; every element is rotated by its own thread.

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// Frequencies per fast-path thread: one 16-byte vector of each half-row.
constexpr int kRopeVector = 8;
// Heads per fast-path thread sharing one set of cosines and sines.
constexpr int kRopeHeadsPerThread = 8;
// Fast-path block size; two blocks per SM keep 128 KiB of loads in flight.
constexpr int kRopeThreads = 256;

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

// Fast path. Work item = (token, group of kRopeHeadsPerThread heads, chunk of
// kRopeVector frequencies), chunk fastest so a warp covers whole rows; all
// items < 2^31. The loads of all heads are issued before the trigonometry,
// which then overlaps their latency.
__global__ void __launch_bounds__(kRopeThreads, 2)
    RopeVectorKernel(__nv_bfloat16* qkv, uint32_t items, uint32_t seq, uint32_t chunks,
                     uint32_t groups, int64_t heads, int64_t rotated, int64_t hd, float theta,
                     float direction) {
  const int64_t half = hd / 2;
  for (uint32_t item = blockIdx.x * blockDim.x + threadIdx.x; item < items;
       item += gridDim.x * blockDim.x) {
    const uint32_t chunk = item % chunks, group = (item / chunks) % groups;
    const uint32_t token = item / (chunks * groups), s = token % seq;
    const int64_t i0 = int64_t{chunk} * kRopeVector, h0 = int64_t{group} * kRopeHeadsPerThread;
    __nv_bfloat16* first = qkv + (int64_t{token} * heads + h0) * hd + i0;
    Bf16x8 x1v[kRopeHeadsPerThread], x2v[kRopeHeadsPerThread];
#pragma unroll
    for (int j = 0; j < kRopeHeadsPerThread; ++j) {
      if (h0 + j < rotated) {
        x1v[j].raw = *reinterpret_cast<const uint4*>(first + j * hd);
        x2v[j].raw = *reinterpret_cast<const uint4*>(first + j * hd + half);
      }
    }
    float c[kRopeVector], sn[kRopeVector];
#pragma unroll
    for (int k = 0; k < kRopeVector; ++k) {
      const float inv_freq =
          powf(theta, -2.0f * static_cast<float>(i0 + k) / static_cast<float>(hd));
      const float angle = static_cast<float>(s) * inv_freq;
      c[k] = cosf(angle);
      sn[k] = direction * sinf(angle);
    }
#pragma unroll
    for (int j = 0; j < kRopeHeadsPerThread; ++j) {
      if (h0 + j >= rotated) continue;
      Bf16x8 y1v, y2v;
#pragma unroll
      for (int p = 0; p < kRopeVector / 2; ++p) {
        const float2 x1 = __bfloat1622float2(x1v[j].pair[p]);
        const float2 x2 = __bfloat1622float2(x2v[j].pair[p]);
        const float c0 = c[2 * p], c1 = c[2 * p + 1], s0 = sn[2 * p], s1 = sn[2 * p + 1];
        // Round to nearest even, as __float2bfloat16_rn.
        y1v.pair[p] = __floats2bfloat162_rn(x1.x * c0 - x2.x * s0, x1.y * c1 - x2.y * s1);
        y2v.pair[p] = __floats2bfloat162_rn(x2.x * c0 + x1.x * s0, x2.y * c1 + x1.y * s1);
      }
      *reinterpret_cast<uint4*>(first + j * hd) = y1v.raw;
      *reinterpret_cast<uint4*>(first + j * hd + half) = y2v.raw;
    }
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
  auto* data = static_cast<__nv_bfloat16*>(qkv.data);
  const int64_t chunks = hd / 2 / kRopeVector;
  const int64_t groups = (rotated_heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread;
  const int64_t items = tokens * groups * chunks;
  if ((hd / 2) % kRopeVector == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0 &&
      items <= INT_MAX) {
    RopeVectorKernel<<<BlocksFor(items, kRopeThreads), kRopeThreads, 0, stream>>>(
        data, static_cast<uint32_t>(items), static_cast<uint32_t>(s), static_cast<uint32_t>(chunks),
        static_cast<uint32_t>(groups), heads, rotated_heads, hd, theta, direction);
  } else {
    RopeKernel<<<BlocksFor(total, 256), 256, 0, stream>>>(data, tokens, s, heads, rotated_heads, hd,
                                                          theta, direction);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

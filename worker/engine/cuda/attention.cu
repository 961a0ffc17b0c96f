// Causal softmax attention on the GPU, tiled, exact, with the CPU
// reference's formulas (worker/engine/cpu/attention.h): scale 1/sqrtf(hd),
// fp32 scores and softmax, lse saved for the backward, which recomputes P
// from it.
//
// Work split: 32 x 32 tiles of (queries, keys) per (batch, head), staged in
// shared memory as fp32 (row stride hd + 1, so a lane per row reads without
// bank conflicts). A block has 8 warps; each warp owns 4 rows of its tile.
//  * Forward: one block per (query tile, head, batch) walks the key tiles up
//    to the diagonal with an online softmax (running max and sum, rescaled
//    accumulator), lanes indexing keys for the scores and head-dim columns
//    for the output.
//  * Backward: D_i = dO_i · O_i per query first; then one kernel per query
//    tile for dQ (walking key tiles) and one per key tile for dK and dV
//    (walking query tiles from the diagonal on). Every gradient element is
//    owned by one thread: no atomics, and the result is deterministic.
// Limits: hd <= 256 (the per-lane accumulators); S is limited only by the
// grid (ceil(S / 32) blocks). Shared memory per block is 3 (forward) or
// 4 (backward) tiles of 32 x (hd + 1) fp32: up to 132 KiB at hd = 256,
// granted through the opt-in attribute. Compute is O(S^2 hd) on CUDA cores,
// not tensor cores: the tensor-core (wgmma) kernel is the next step.

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

constexpr int kTile = 32;                       // rows per tile (queries or keys)
constexpr int kWarps = 8;                       // warps per block
constexpr int kRowsPerWarp = kTile / kWarps;    // tile rows each warp owns
constexpr int kMaxHeadDim = 256;
constexpr int kMaxPerLane = kMaxHeadDim / 32;   // head-dim columns per lane
constexpr unsigned kFullMask = 0xffffffffu;

// Element c of row s, part (0 q, 1 k, 2 v), head h of qkv [B, S, 3, nh, hd].
__device__ __forceinline__ int64_t QkvIndex(int64_t b, int64_t s, int part, int64_t h,
                                            int64_t seq, int64_t heads, int hd) {
  return (((b * seq + s) * 3 + part) * heads + h) * hd;
}
// Row s, head h of out/grad_out [B, S, nh, hd].
__device__ __forceinline__ int64_t OutIndex(int64_t b, int64_t s, int64_t h, int64_t seq,
                                            int64_t heads, int hd) {
  return ((b * seq + s) * heads + h) * hd;
}

// Stages rows [row0, row0 + kTile) of a [*, hd] bf16 view into tile[kTile][hd + 1]
// as fp32 (zeros past the sequence end). index(s) gives row s's offset.
template <typename Index>
__device__ __forceinline__ void LoadTile(const __nv_bfloat16* src, Index index, int64_t row0,
                                         int64_t seq, int hd, float* tile) {
  const int ld = hd + 1;
  for (int i = threadIdx.x; i < kTile * hd; i += blockDim.x) {
    const int r = i / hd, c = i % hd;
    const int64_t s = row0 + r;
    tile[r * ld + c] = s < seq ? __bfloat162float(src[index(s) + c]) : 0.f;
  }
}

// Dot product of two staged rows (stride-1 within a row).
__device__ __forceinline__ float RowDot(const float* a, const float* b, int hd) {
  float acc = 0.f;
  for (int c = 0; c < hd; ++c) acc += a[c] * b[c];
  return acc;
}

// ---- kernels ---------------------------------------------------------------

__global__ void __launch_bounds__(kWarps * 32)
    AttentionForwardKernel(const __nv_bfloat16* qkv, __nv_bfloat16* out, float* lse,
                           int64_t seq, int64_t heads, int hd) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* q_s = smem;
  float* k_s = q_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  auto q_index = [&](int64_t s) { return QkvIndex(b, s, 0, h, seq, heads, hd); };
  auto k_index = [&](int64_t s) { return QkvIndex(b, s, 1, h, seq, heads, hd); };
  auto v_index = [&](int64_t s) { return QkvIndex(b, s, 2, h, seq, heads, hd); };
  LoadTile(qkv, q_index, q0, seq, hd, q_s);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kMaxPerLane];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    for (int e = 0; e < kMaxPerLane; ++e) acc[r][e] = 0.f;
  }
  const int64_t q_last = min(q0 + kTile, seq) - 1;
  // Key tiles start at multiples of kTile <= q0, so every query of this
  // block sees at least key k0 of every tile: the running max stays finite.
  for (int64_t k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    LoadTile(qkv, k_index, k0, seq, hd, k_s);
    LoadTile(qkv, v_index, k0, seq, hd, v_s);
    __syncthreads();
    const int64_t key = k0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int qr = warp * kRowsPerWarp + r;
      const int64_t qi = q0 + qr;
      if (qi >= seq) break;  // warp-uniform
      const bool visible = key <= qi;
      const float s = visible ? RowDot(q_s + qr * ld, k_s + lane * ld, hd) * scale : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(s));
      const float p = visible ? expf(s - m_new) : 0.f;
      const float correction = expf(m[r] - m_new);
      l[r] = l[r] * correction + WarpSum(p);
      m[r] = m_new;
      for (int e = 0; e < kMaxPerLane; ++e) acc[r][e] *= correction;
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
        for (int e = 0; e < kMaxPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < hd) acc[r][e] += pj * v_s[j * ld + c];
        }
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= seq) break;
    const int64_t o = OutIndex(b, qi, h, seq, heads, hd);
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < hd) out[o + c] = __float2bfloat16_rn(acc[r][e] / l[r]);
    }
    if (lane == 0) lse[(b * heads + h) * seq + qi] = logf(l[r]) + m[r];
  }
}

// d[b, h, s] = dO · O for one row per warp.
__global__ void AttentionRowDotKernel(const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                      float* d, int64_t rows, int64_t seq, int64_t heads,
                                      int hd) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += warps) {
    // row enumerates [B, S, nh] (the out layout); d is [B, nh, S].
    const int64_t h = row % heads, s = (row / heads) % seq, b = row / (heads * seq);
    float acc = 0.f;
    for (int c = lane; c < hd; c += 32) {
      acc += __bfloat162float(dout[row * hd + c]) * __bfloat162float(out[row * hd + c]);
    }
    acc = WarpSum(acc);
    if (lane == 0) d[(b * heads + h) * seq + s] = acc;
  }
}

// dQ for one query tile: walks the key tiles up to the diagonal.
__global__ void __launch_bounds__(kWarps * 32)
    AttentionBackwardDqKernel(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const float* lse, const float* d, __nv_bfloat16* dqkv,
                              int64_t seq, int64_t heads, int hd) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* q_s = smem;
  float* do_s = q_s + kTile * ld;
  float* k_s = do_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 0, h, seq, heads, hd); }, q0, seq, hd, q_s);
  LoadTile(dout, [&](int64_t s) { return OutIndex(b, s, h, seq, heads, hd); }, q0, seq, hd, do_s);

  float lse_r[kRowsPerWarp], d_r[kRowsPerWarp], dq[kRowsPerWarp][kMaxPerLane];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = min(q0 + warp * kRowsPerWarp + r, seq - 1);
    lse_r[r] = lse[(b * heads + h) * seq + qi];
    d_r[r] = d[(b * heads + h) * seq + qi];
    for (int e = 0; e < kMaxPerLane; ++e) dq[r][e] = 0.f;
  }
  const int64_t q_last = min(q0 + kTile, seq) - 1;
  for (int64_t k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();
    LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 1, h, seq, heads, hd); }, k0, seq, hd, k_s);
    LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 2, h, seq, heads, hd); }, k0, seq, hd, v_s);
    __syncthreads();
    const int64_t key = k0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int qr = warp * kRowsPerWarp + r;
      const int64_t qi = q0 + qr;
      if (qi >= seq) break;
      float ds = 0.f;
      if (key <= qi) {
        const float p = expf(RowDot(q_s + qr * ld, k_s + lane * ld, hd) * scale - lse_r[r]);
        const float dp = RowDot(do_s + qr * ld, v_s + lane * ld, hd);
        ds = p * (dp - d_r[r]);
      }
      for (int j = 0; j < kTile; ++j) {
        const float dsj = __shfl_sync(kFullMask, ds, j);
        for (int e = 0; e < kMaxPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < hd) dq[r][e] += dsj * k_s[j * ld + c];
        }
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= seq) break;
    const int64_t o = QkvIndex(b, qi, 0, h, seq, heads, hd);
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < hd) dqkv[o + c] = __float2bfloat16_rn(scale * dq[r][e]);
    }
  }
}

// dK and dV for one key tile: walks the query tiles from the diagonal on.
__global__ void __launch_bounds__(kWarps * 32)
    AttentionBackwardDkvKernel(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const float* lse, const float* d, __nv_bfloat16* dqkv,
                               int64_t seq, int64_t heads, int hd) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* k_s = smem;
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;
  float* do_s = q_s + kTile * ld;
  __shared__ float lse_s[kTile], d_s[kTile];
  const int64_t k0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 1, h, seq, heads, hd); }, k0, seq, hd, k_s);
  LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 2, h, seq, heads, hd); }, k0, seq, hd, v_s);

  float dk[kRowsPerWarp][kMaxPerLane], dv[kRowsPerWarp][kMaxPerLane];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    for (int e = 0; e < kMaxPerLane; ++e) dk[r][e] = dv[r][e] = 0.f;
  }
  for (int64_t q0 = k0; q0 < seq; q0 += kTile) {
    __syncthreads();
    LoadTile(qkv, [&](int64_t s) { return QkvIndex(b, s, 0, h, seq, heads, hd); }, q0, seq, hd, q_s);
    LoadTile(dout, [&](int64_t s) { return OutIndex(b, s, h, seq, heads, hd); }, q0, seq, hd, do_s);
    if (threadIdx.x < kTile) {
      const int64_t qi = q0 + threadIdx.x;
      lse_s[threadIdx.x] = qi < seq ? lse[(b * heads + h) * seq + qi] : 0.f;
      d_s[threadIdx.x] = qi < seq ? d[(b * heads + h) * seq + qi] : 0.f;
    }
    __syncthreads();
    const int64_t query = q0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int kr = warp * kRowsPerWarp + r;
      const int64_t kj = k0 + kr;
      if (kj >= seq) break;
      float p = 0.f, ds = 0.f;
      if (query < seq && query >= kj) {
        p = expf(RowDot(q_s + lane * ld, k_s + kr * ld, hd) * scale - lse_s[lane]);
        const float dp = RowDot(do_s + lane * ld, v_s + kr * ld, hd);
        ds = p * (dp - d_s[lane]);
      }
      for (int i = 0; i < kTile; ++i) {
        const float pi = __shfl_sync(kFullMask, p, i);
        const float dsi = __shfl_sync(kFullMask, ds, i);
        for (int e = 0; e < kMaxPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < hd) {
            dv[r][e] += pi * do_s[i * ld + c];
            dk[r][e] += dsi * q_s[i * ld + c];
          }
        }
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t kj = k0 + warp * kRowsPerWarp + r;
    if (kj >= seq) break;
    const int64_t ok = QkvIndex(b, kj, 1, h, seq, heads, hd);
    const int64_t ov = QkvIndex(b, kj, 2, h, seq, heads, hd);
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < hd) {
        dqkv[ok + c] = __float2bfloat16_rn(scale * dk[r][e]);
        dqkv[ov + c] = __float2bfloat16_rn(dv[r][e]);
      }
    }
  }
}

// ---- host helpers ----------------------------------------------------------

absl::Status CheckAttentionShape(int64_t b, int64_t s, int64_t nh, int64_t hd) {
  if (hd < 1 || hd > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("qkv: head dim ", hd, " is outside [1, ", kMaxHeadDim, "]"));
  }
  if ((s + kTile - 1) / kTile > (int64_t{1} << 31) - 1 || nh > 65535 || b > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("qkv: [", b, ", ", s, ", 3, ", nh, ", ", hd, "] exceeds the launch grid"));
  }
  return absl::OkStatus();
}

// Launch with `tiles` tiles of dynamic shared memory, opting in above 48 KiB.
template <typename Kernel>
absl::Status PrepareSharedMemory(Kernel kernel, int tiles, int hd, size_t* bytes) {
  *bytes = static_cast<size_t>(tiles) * kTile * (hd + 1) * sizeof(float);
  if (*bytes > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(*bytes)));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchAttentionForward(const TensorDesc& qkv, const TensorDesc& out,
                                    const TensorDesc& lse, cudaStream_t stream) {
  const int64_t b = qkv.shape[0], s = qkv.shape[1], nh = qkv.shape[3], hd = qkv.shape[4];
  absl::Status shape = CheckAttentionShape(b, s, nh, hd);
  if (!shape.ok()) return shape;
  if (b * s * nh == 0) return absl::OkStatus();
  size_t smem = 0;
  absl::Status prepared = PrepareSharedMemory(AttentionForwardKernel, 3, hd, &smem);
  if (!prepared.ok()) return prepared;
  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(nh),
                  static_cast<unsigned>(b));
  AttentionForwardKernel<<<grid, kWarps * 32, smem, stream>>>(
      static_cast<const __nv_bfloat16*>(qkv.data), static_cast<__nv_bfloat16*>(out.data),
      static_cast<float*>(lse.data), s, nh, static_cast<int>(hd));
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchAttentionBackward(const TensorDesc& dout, const TensorDesc& qkv,
                                     const TensorDesc& out, const TensorDesc& lse,
                                     const TensorDesc& dqkv, float* scratch, cudaStream_t stream) {
  const int64_t b = qkv.shape[0], s = qkv.shape[1], nh = qkv.shape[3], hd = qkv.shape[4];
  absl::Status shape = CheckAttentionShape(b, s, nh, hd);
  if (!shape.ok()) return shape;
  const int64_t rows = b * s * nh;
  if (rows == 0) return absl::OkStatus();
  const auto* dout_p = static_cast<const __nv_bfloat16*>(dout.data);
  const auto* qkv_p = static_cast<const __nv_bfloat16*>(qkv.data);
  const auto* lse_p = static_cast<const float*>(lse.data);
  auto* dqkv_p = static_cast<__nv_bfloat16*>(dqkv.data);
  const int hd_i = static_cast<int>(hd);

  AttentionRowDotKernel<<<BlocksFor(rows * 32, 256), 256, 0, stream>>>(
      dout_p, static_cast<const __nv_bfloat16*>(out.data), scratch, rows, s, nh, hd_i);
  CUDA_RETURN_IF_LAUNCH_FAILED();

  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(nh),
                  static_cast<unsigned>(b));
  size_t smem = 0;
  absl::Status prepared = PrepareSharedMemory(AttentionBackwardDqKernel, 4, hd_i, &smem);
  if (!prepared.ok()) return prepared;
  AttentionBackwardDqKernel<<<grid, kWarps * 32, smem, stream>>>(dout_p, qkv_p, lse_p, scratch,
                                                                 dqkv_p, s, nh, hd_i);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  absl::Status prepared_kv = PrepareSharedMemory(AttentionBackwardDkvKernel, 4, hd_i, &smem);
  if (!prepared_kv.ok()) return prepared_kv;
  AttentionBackwardDkvKernel<<<grid, kWarps * 32, smem, stream>>>(dout_p, qkv_p, lse_p, scratch,
                                                                  dqkv_p, s, nh, hd_i);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

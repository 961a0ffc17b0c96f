// Causal attention forward on tensor cores, FlashAttention-2 style: for one
// block of 128 queries of one head, walk the key/value tiles up to the
// diagonal, keeping a running row max and row sum (online softmax) and a
// rescaled fp32 output accumulator in registers. Only the output and the
// per-query log-sum-exp leave the chip; no S x S tensor exists.
//
// Same quantities as the CPU reference (worker/engine/cpu/attention.h):
// s = q.k / sqrt(hd), out = softmax(s) v, lse = logsumexp(s). It differs in
// fp32 summation order, in exp2 with a folded log2(e) scale, and in feeding
// P to the P V product as bf16 (as every flash kernel does).
//
// Work split: a block of 4 warps owns 128 consecutive queries of one head
// (warp w the 32 rows [32 w, 32 w + 32), two 16-row MMA tiles, so that every
// K/V fragment read from shared memory feeds two products); Q stays in
// shared memory, K and V tiles of 64 rows are double-buffered with cp.async
// so the next tile loads while this one is multiplied. Grouped-query heads read their shared K/V
// head directly from the packed qkv tensor. Blocks are issued heaviest
// (last query block, most tiles) first.

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

using flash::AttentionParams;

constexpr int kBlockQ = 128;   // queries per block
constexpr int kBlockKV = 64;   // keys per tile
constexpr int kWarpRows = 32;  // queries per warp: kM = 2 MMA row tiles
constexpr int kM = kWarpRows / 16;
constexpr int kWarps = kBlockQ / kWarpRows;
constexpr int kThreads = 32 * kWarps;

template <int kD>
constexpr int ForwardSmemBytes() {
  return (kBlockQ + 4 * kBlockKV) * kD * 2;  // Q, K[2], V[2]
}

// ---- kernels ---------------------------------------------------------------

template <int kD>
__global__ void __launch_bounds__(kThreads)
    FlashAttentionForwardKernel(AttentionParams p, __nv_bfloat16* out, float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileBytes = kBlockKV * kD * 2;
  const uint32_t s_q = flash::SmemAddress(smem);
  // Buffer i of K is at s_k + i * kTileBytes, of V at s_v + i * kTileBytes.
  const uint32_t s_k = s_q + kBlockQ * kD * 2, s_v = s_k + 2 * kTileBytes;

  const int q_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t q0 = int64_t(q_block) * kBlockQ;
  const int64_t ts = p.qkv_token_stride;
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;
  const __nv_bfloat16* k_src = batch + int64_t(p.heads + kv_head) * kD;
  const __nv_bfloat16* v_src = batch + int64_t(p.heads + p.kv_heads + kv_head) * kD;

  flash::LoadTileAsync<kBlockQ, kD, kThreads>(s_q, batch + q0 * ts + int64_t(h) * kD, ts,
                                              p.seq - q0, p.qkv);
  flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_k, k_src, ts, p.seq, p.qkv);
  flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_v, v_src, ts, p.seq, p.qkv);
  flash::CommitAsyncCopies();

  const int64_t last_row = min(q0 + kBlockQ, p.seq) - 1;
  const int tiles = static_cast<int>(last_row / kBlockKV) + 1;
  const int64_t warp_row0 = q0 + kWarpRows * warp;

  // Per MMA row tile mt and half (0: row g, 1: row g + 8) of this lane.
  float o[kM][kD / 8][4] = {};
  float m[kM][2], l[kM][2];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }
  for (int j = 0; j < tiles; ++j) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile j visible; every warp is done with tile j - 1
    if (j + 1 < tiles) {
      const int64_t k0 = int64_t(j + 1) * kBlockKV;
      const int buf = (j + 1) & 1;
      flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_k + buf * kTileBytes, k_src + k0 * ts, ts,
                                                   p.seq - k0, p.qkv);
      flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_v + buf * kTileBytes, v_src + k0 * ts, ts,
                                                   p.seq - k0, p.qkv);
    }
    flash::CommitAsyncCopies();
    const int64_t k0 = int64_t(j) * kBlockKV;
    if (warp_row0 + kWarpRows - 1 < k0) continue;  // all of this tile is in the warp's future

    float s[kM][kBlockKV / 8][4] = {};
    flash::MmaABt<kD, kM, kBlockKV / 8>(s, s_q, kWarpRows * warp, s_k + (j & 1) * kTileBytes, 0,
                                        lane);

    // Scale into the log2 domain, mask the future, and update the row maxima.
    const bool diagonal = k0 + kBlockKV - 1 > warp_row0;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      const int64_t row_lo = warp_row0 + 16 * mt + g;
      float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
      for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[mt][nt][e] * p.scale_log2;
          if (diagonal && k0 + nt * 8 + 2 * t + (e & 1) > row_lo + (e >> 1) * 8) v = -INFINITY;
          s[mt][nt][e] = v;
          mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
        mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
      }
      // Each warp's rows all lie at or after the tile's first key (32 divides
      // the tile size), so every row sees a key and mx is finite. Should the tile sizes
      // change, a row with no key yet keeps m = -inf and uses 0 as its
      // reference, so that exp2 gives 0 rather than NaN.
      float alpha[2], ref[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        ref[half] = mx[half] == -INFINITY ? 0.f : mx[half];
        alpha[half] = flash::FastExp2(m[mt][half] - ref[half]);
        m[mt][half] = mx[half];
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = flash::FastExp2(s[mt][nt][e] - ref[e >> 1]);
          sum[e >> 1] += s[mt][nt][e];
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) l[mt][half] = l[mt][half] * alpha[half] + sum[half];
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][nt][e] *= alpha[e >> 1];
      }
    }
    flash::MmaPB<kD, kM, kBlockKV / 16>(o, s, s_v + (j & 1) * kTileBytes, 0, lane);
  }

  // Full row sums (this lane held a partial one), then out = o / l and
  // lse = ln(l) + m (m back from the log2 domain).
  const int64_t lse_row0 = (int64_t(b) * p.heads + h) * p.seq;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      l[mt][half] += __shfl_xor_sync(0xffffffffu, l[mt][half], 1);
      l[mt][half] += __shfl_xor_sync(0xffffffffu, l[mt][half], 2);
      const int64_t row = warp_row0 + 16 * mt + g + 8 * half;
      if (t == 0 && row < p.seq) {
        lse[lse_row0 + row] = (m[mt][half] + __log2f(l[mt][half])) * flash::kLn2;
      }
    }
    const int64_t row0 = warp_row0 + 16 * mt;
    if (row0 >= p.seq) break;
    // This warp's Q rows are no longer read by anyone: stage the output there.
    flash::StoreRows<kD>(o[mt], 1.f / l[mt][0], 1.f / l[mt][1], smem, kWarpRows * warp + 16 * mt,
                         out + (int64_t(b) * p.seq + row0) * p.out_token_stride + int64_t(h) * kD,
                         p.out_token_stride, p.seq - row0, lane);
  }
}

template <int kD>
absl::Status Launch(const AttentionParams& p, int64_t batch, __nv_bfloat16* out, float* lse,
                    cudaStream_t stream) {
  constexpr int kSmem = ForwardSmemBytes<kD>();
  static std::atomic<uint64_t> smem_allowed{0};
  CUDA_RETURN_IF_ERROR(
      flash::AllowDynamicSmem(FlashAttentionForwardKernel<kD>, kSmem, smem_allowed));
  const dim3 grid(static_cast<unsigned>((p.seq + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(p.heads), static_cast<unsigned>(batch));
  FlashAttentionForwardKernel<kD><<<grid, kThreads, kSmem, stream>>>(p, out, lse);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchFlashAttentionForward(const AttentionShape& shape, const void* qkv, void* out,
                                         float* lse, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  AttentionParams p = flash::MakeAttentionParams(shape, qkv);
  auto* o = static_cast<__nv_bfloat16*>(out);
  switch (shape.head_dim) {
    case 64:
      return Launch<64>(p, shape.batch, o, lse, stream);
    case 128:
      return Launch<128>(p, shape.batch, o, lse, stream);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention: head dim ", shape.head_dim, " is not supported (64 or 128)"));
  }
}

}  // namespace cuda
}  // namespace tessera

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
// Work split: a block of 8 warps owns 128 consecutive queries of one head
// (warp w the 16 rows [16 w, 16 w + 16)); Q stays in shared memory, K and V
// tiles of 64 rows are double-buffered with cp.async so the next tile loads
// while this one is multiplied. Grouped-query heads read their shared K/V
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
constexpr int kWarps = kBlockQ / 16;
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
  const int64_t warp_row0 = q0 + 16 * warp;
  const int64_t row_lo = warp_row0 + g, row_hi = row_lo + 8;

  float o[kD / 8][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  for (int j = 0; j < tiles; ++j) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile j visible; every warp is done with tile j - 1
    if (j + 1 < tiles) {
      const int64_t k0 = int64_t(j + 1) * kBlockKV;
      const int buf = (j + 1) & 1;
      flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_k + buf * kTileBytes, k_src + k0 * ts, ts, p.seq - k0,
                                                   p.qkv);
      flash::LoadTileAsync<kBlockKV, kD, kThreads>(s_v + buf * kTileBytes, v_src + k0 * ts, ts, p.seq - k0,
                                                   p.qkv);
    }
    flash::CommitAsyncCopies();
    const int64_t k0 = int64_t(j) * kBlockKV;
    if (warp_row0 + 15 < k0) continue;  // every key of this tile is in this warp's future

    float s[kBlockKV / 8][4] = {};
    flash::MmaABt<kD, kBlockKV / 8>(s, s_q, 16 * warp, s_k + (j & 1) * kTileBytes, 0, lane);

    // Scale into the log2 domain, mask the future, and update the row maxima.
    const bool diagonal = k0 + kBlockKV - 1 > warp_row0;
    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * p.scale_log2;
        if (diagonal) {
          const int64_t col = k0 + nt * 8 + 2 * t + (e & 1);
          if (col > (e < 2 ? row_lo : row_hi)) v = -INFINITY;
        }
        s[nt][e] = v;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int o_ = 1; o_ <= 2; o_ <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, o_));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, o_));
    }
    // Every row of a warp that reaches here has at least one visible key,
    // so the maxima are finite; exp2(-inf - m) = 0 rescales an empty start.
    const float alpha_lo = flash::FastExp2(m_lo - mx_lo);
    const float alpha_hi = flash::FastExp2(m_hi - mx_hi);
    m_lo = mx_lo;
    m_hi = mx_hi;
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < kBlockKV / 8; ++nt) {
      s[nt][0] = flash::FastExp2(s[nt][0] - m_lo);
      s[nt][1] = flash::FastExp2(s[nt][1] - m_lo);
      s[nt][2] = flash::FastExp2(s[nt][2] - m_hi);
      s[nt][3] = flash::FastExp2(s[nt][3] - m_hi);
      sum_lo += s[nt][0] + s[nt][1];
      sum_hi += s[nt][2] + s[nt][3];
    }
    l_lo = l_lo * alpha_lo + sum_lo;  // this lane's partial row sums
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      o[nt][0] *= alpha_lo;
      o[nt][1] *= alpha_lo;
      o[nt][2] *= alpha_hi;
      o[nt][3] *= alpha_hi;
    }
    flash::MmaPB<kD, kBlockKV / 16>(o, s, s_v + (j & 1) * kTileBytes, 0, lane);
  }

  // Full row sums, then out = o / l and lse = ln(l) + m (m back from log2).
#pragma unroll
  for (int o_ = 1; o_ <= 2; o_ <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, o_);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, o_);
  }
  if (warp_row0 >= p.seq) return;
  const int64_t lse_row0 = (int64_t(b) * p.heads + h) * p.seq;
  if (t == 0) {
    if (row_lo < p.seq) lse[lse_row0 + row_lo] = (m_lo + __log2f(l_lo)) * flash::kLn2;
    if (row_hi < p.seq) lse[lse_row0 + row_hi] = (m_hi + __log2f(l_hi)) * flash::kLn2;
  }
  // This warp's Q rows are no longer read by anyone: stage the output there.
  flash::StoreRows<kD>(o, 1.f / l_lo, 1.f / l_hi, smem, 16 * warp,
                       out + (int64_t(b) * p.seq + warp_row0) * p.out_token_stride + int64_t(h) * kD,
                       p.out_token_stride, p.seq - warp_row0, lane);
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

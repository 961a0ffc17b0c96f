// Causal attention backward on tensor cores, FlashAttention-2 style, with P
// recomputed from the forward's log-sum-exp (no S x S tensor anywhere) and
// every gradient element owned by exactly one thread block: no atomics, so
// the result is bit-identical run to run.
//
// Same quantities as the CPU reference (worker/engine/cpu/attention.h):
//   P = exp(s - lse), D_i = dO_i . O_i, dP = dO V^T, dS = P (dP - D),
//   dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO,
// with K and V gradients summed over the query heads of their group.
//
// Three kernels:
//  1. Prepare: D_i from the stored bf16 out and grad_out, and lse in the
//     log2 domain, both padded to whole 64-row tiles (padding rows get
//     D = 0 and lse = +inf, so their P is exactly 0).
//  2. dK/dV: a block of 4 warps owns 64 keys of one K/V head (warp w the
//     16 rows [16 w, 16 w + 16)) and walks every query tile at or after the
//     diagonal, for every query head of the group, accumulating dK and dV in
//     registers. It computes the transposed products (S^T = K Q^T,
//     dP^T = V dO^T) so each warp's rows are its keys.
//  3. dQ: a block of 4 warps owns 64 queries of one head and walks the key
//     tiles up to the diagonal, recomputing S and dP. Recomputing is the
//     price of determinism: the alternative, adding dQ from the dK/dV
//     blocks, needs atomics (order-dependent sums) or a T x T-sized buffer.
// Query/dO tiles (kernel 2) and K/V tiles (kernel 3) are double-buffered
// with cp.async.

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

using flash::AttentionParams;

constexpr int kTile = 64;  // rows of every tile (queries or keys)
constexpr int kWarps = kTile / 16;
constexpr int kThreads = 32 * kWarps;

int64_t PaddedSeq(int64_t seq) { return (seq + kTile - 1) / kTile * kTile; }

template <int kD>
constexpr int KVSmemBytes() {
  return 6 * kTile * kD * 2 + 4 * kTile * 4;  // K, V, Q[2], dO[2]; lse2[2], D[2]
}
template <int kD>
constexpr int QSmemBytes() {
  return 6 * kTile * kD * 2;  // Q, dO, K[2], V[2]
}

// ---- kernels ---------------------------------------------------------------

// delta[r] = dO_r . O_r and lse2[r] = lse_r * log2(e) for every padded row
// r = (b * heads + h) * seq_pad + s; 8 lanes per row.
template <int kD>
__global__ void AttentionBackwardPrepareKernel(AttentionParams p, int64_t batch,
                                               const __nv_bfloat16* dout,
                                               const __nv_bfloat16* out, const float* lse,
                                               int64_t seq_pad, float* delta, float* lse2) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 3;
  const int sub = threadIdx.x & 7;
  const bool valid = row < batch * p.heads * seq_pad;
  const int64_t s = row % seq_pad, bh = row / seq_pad;
  const bool real = valid && s < p.seq;
  float acc = 0.f;
  if (real) {
    const int64_t b = bh / p.heads, h = bh % p.heads;
    const int64_t offset = (b * p.seq + s) * p.out_token_stride + h * kD;
    for (int c = sub; c < kD / 8; c += 8) {
      const uint4 dv = *reinterpret_cast<const uint4*>(dout + offset + 8 * c);
      const uint4 ov = *reinterpret_cast<const uint4*>(out + offset + 8 * c);
      const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&dv);
      const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&ov);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 df = __bfloat1622float2(d2[i]), of = __bfloat1622float2(o2[i]);
        acc += df.x * of.x + df.y * of.y;
      }
    }
  }
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (valid && sub == 0) {
    delta[row] = acc;
    lse2[row] = real ? lse[bh * p.seq + s] * flash::kLog2e : INFINITY;
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardKVKernel(AttentionParams p, const __nv_bfloat16* dout, const float* delta,
                              const float* lse2, int64_t seq_pad, __nv_bfloat16* dqkv) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileBytes = kTile * kD * 2;
  constexpr int kChunk = kD == 128 ? 32 : 64;  // query columns per pass
  unsigned char* k_ptr = smem;
  unsigned char* v_ptr = smem + kTileBytes;
  const uint32_t s_k = flash::SmemAddress(k_ptr), s_v = s_k + kTileBytes;
  // Buffer i of Q is at s_q + i * kTileBytes, of dO at s_do + i * kTileBytes.
  const uint32_t s_q = s_k + 2 * kTileBytes, s_do = s_k + 4 * kTileBytes;
  float* s_lse = reinterpret_cast<float*>(smem + 6 * kTileBytes);  // [2][kTile]
  float* s_delta = s_lse + 2 * kTile;                              // [2][kTile]

  const int kv_block = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  const int64_t k0 = int64_t(kv_block) * kTile;
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;

  flash::LoadTileAsync<kTile, kD, kThreads>(
      s_k, batch + k0 * ts + int64_t(p.heads + kv_head) * kD, ts, p.seq - k0, p.qkv);
  flash::LoadTileAsync<kTile, kD, kThreads>(
      s_v, batch + k0 * ts + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - k0, p.qkv);

  const int q_tiles = static_cast<int>(seq_pad / kTile);
  const int per_head = q_tiles - kv_block;  // query tiles at or after the diagonal
  const int iterations = group * per_head;
  auto issue = [&](int it, int buf) {
    const int h = kv_head * group + it / per_head;
    const int64_t q0 = int64_t(kv_block + it % per_head) * kTile;
    flash::LoadTileAsync<kTile, kD, kThreads>(s_q + buf * kTileBytes,
                                              batch + q0 * ts + int64_t(h) * kD, ts, p.seq - q0,
                                              p.qkv);
    flash::LoadTileAsync<kTile, kD, kThreads>(
        s_do + buf * kTileBytes, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os, p.seq - q0, dout);
    const int64_t stats = (int64_t(b) * p.heads + h) * seq_pad + q0;
    if (threadIdx.x < 2 * kTile / 4) {  // 16 lanes copy lse2, 16 copy delta
      const int c = threadIdx.x % (kTile / 4);
      const bool is_lse = threadIdx.x < kTile / 4;
      const float* src = (is_lse ? lse2 : delta) + stats + 4 * c;
      float* dst = (is_lse ? s_lse : s_delta) + buf * kTile + 4 * c;
      flash::CopyAsync16(flash::SmemAddress(dst), src, 16);
    }
  };
  issue(0, 0);
  flash::CommitAsyncCopies();

  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  const int64_t kv_lo = k0 + 16 * warp + g, kv_hi = kv_lo + 8;
  for (int it = 0; it < iterations; ++it) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile `it` visible; every warp is done with tile it - 1
    if (it + 1 < iterations) issue(it + 1, (it + 1) & 1);
    flash::CommitAsyncCopies();
    const int buf = it & 1;
    const bool diagonal = it % per_head == 0;
    const int64_t q0 = int64_t(kv_block + it % per_head) * kTile;
    const float* tile_lse = s_lse + buf * kTile;
    const float* tile_delta = s_delta + buf * kTile;
    const uint32_t q_tile = s_q + buf * kTileBytes, do_tile = s_do + buf * kTileBytes;

    // The query tile in column chunks of kChunk (register budget at hd 128).
#pragma unroll 1
    for (int c0 = 0; c0 < kTile; c0 += kChunk) {
      // P^T = exp2(S^T scale_log2 - lse2[q]), zero where the query precedes the key.
      float pt[kChunk / 8][4] = {};
      flash::MmaABt<kD, kChunk / 8>(pt, s_k, 16 * warp, q_tile, c0, lane);
#pragma unroll
      for (int nt = 0; nt < kChunk / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = c0 + nt * 8 + 2 * t + (e & 1);
          float v = flash::FastExp2(pt[nt][e] * p.scale_log2 - tile_lse[col]);
          if (diagonal && q0 + col < (e < 2 ? kv_lo : kv_hi)) v = 0.f;
          pt[nt][e] = v;
        }
      }
      // dS^T = P^T (dP^T - D[q]) with dP^T = V dO^T.
      float ds[kChunk / 8][4] = {};
      flash::MmaABt<kD, kChunk / 8>(ds, s_v, 16 * warp, do_tile, c0, lane);
#pragma unroll
      for (int nt = 0; nt < kChunk / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ds[nt][e] = pt[nt][e] * (ds[nt][e] - tile_delta[c0 + nt * 8 + 2 * t + (e & 1)]);
        }
      }
      flash::MmaPB<kD, kChunk / 16>(dv, pt, do_tile, c0, lane);  // dV += P^T dO
      flash::MmaPB<kD, kChunk / 16>(dk, ds, q_tile, c0, lane);   // dK += dS^T Q
    }
  }

  // Each warp's K and V rows are read by that warp alone: stage through them.
  const float scale = p.scale_log2 / flash::kLog2e;
  const int64_t row0 = k0 + 16 * warp;
  __nv_bfloat16* dst = dqkv + (int64_t(b) * p.seq + row0) * ts;
  flash::StoreRows<kD>(dk, scale, scale, k_ptr, 16 * warp,
                       dst + int64_t(p.heads + kv_head) * kD, ts, p.seq - row0, lane);
  flash::StoreRows<kD>(dv, 1.f, 1.f, v_ptr, 16 * warp,
                       dst + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - row0,
                       lane);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardQKernel(AttentionParams p, const __nv_bfloat16* dout, const float* delta,
                             const float* lse2, int64_t seq_pad, __nv_bfloat16* dqkv) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileBytes = kTile * kD * 2;
  const uint32_t s_q = flash::SmemAddress(smem), s_do = s_q + kTileBytes;
  // Buffer i of K is at s_k + i * kTileBytes, of V at s_v + i * kTileBytes.
  const uint32_t s_k = s_q + 2 * kTileBytes, s_v = s_q + 4 * kTileBytes;

  const int q_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  const int64_t q0 = int64_t(q_block) * kTile;
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;
  const __nv_bfloat16* k_src = batch + int64_t(p.heads + kv_head) * kD;
  const __nv_bfloat16* v_src = batch + int64_t(p.heads + p.kv_heads + kv_head) * kD;

  flash::LoadTileAsync<kTile, kD, kThreads>(s_q, batch + q0 * ts + int64_t(h) * kD, ts,
                                            p.seq - q0, p.qkv);
  flash::LoadTileAsync<kTile, kD, kThreads>(
      s_do, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os, p.seq - q0, dout);
  flash::LoadTileAsync<kTile, kD, kThreads>(s_k, k_src, ts, p.seq, p.qkv);
  flash::LoadTileAsync<kTile, kD, kThreads>(s_v, v_src, ts, p.seq, p.qkv);
  flash::CommitAsyncCopies();

  const int64_t row_lo = q0 + 16 * warp + g, row_hi = row_lo + 8;
  const int64_t stats = (int64_t(b) * p.heads + h) * seq_pad;
  const float lse_lo = lse2[stats + row_lo], lse_hi = lse2[stats + row_hi];
  const float delta_lo = delta[stats + row_lo], delta_hi = delta[stats + row_hi];

  float dq[kD / 8][4] = {};
  for (int j = 0; j <= q_block; ++j) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile j visible; every warp is done with tile j - 1
    if (j < q_block) {
      const int64_t k0 = int64_t(j + 1) * kTile;
      const int buf = (j + 1) & 1;
      flash::LoadTileAsync<kTile, kD, kThreads>(s_k + buf * kTileBytes, k_src + k0 * ts, ts,
                                                p.seq - k0, p.qkv);
      flash::LoadTileAsync<kTile, kD, kThreads>(s_v + buf * kTileBytes, v_src + k0 * ts, ts,
                                                p.seq - k0, p.qkv);
    }
    flash::CommitAsyncCopies();
    const bool diagonal = j == q_block;
    const int64_t k0 = int64_t(j) * kTile;
    const uint32_t k_tile = s_k + (j & 1) * kTileBytes, v_tile = s_v + (j & 1) * kTileBytes;

    float ps[kTile / 8][4] = {};
    flash::MmaABt<kD, kTile / 8>(ps, s_q, 16 * warp, k_tile, 0, lane);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t col = k0 + nt * 8 + 2 * t + (e & 1);
        float v = flash::FastExp2(ps[nt][e] * p.scale_log2 - (e < 2 ? lse_lo : lse_hi));
        if (diagonal && col > (e < 2 ? row_lo : row_hi)) v = 0.f;
        ps[nt][e] = v;
      }
    }
    float ds[kTile / 8][4] = {};
    flash::MmaABt<kD, kTile / 8>(ds, s_do, 16 * warp, v_tile, 0, lane);  // dP = dO V^T
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      ds[nt][0] = ps[nt][0] * (ds[nt][0] - delta_lo);
      ds[nt][1] = ps[nt][1] * (ds[nt][1] - delta_lo);
      ds[nt][2] = ps[nt][2] * (ds[nt][2] - delta_hi);
      ds[nt][3] = ps[nt][3] * (ds[nt][3] - delta_hi);
    }
    flash::MmaPB<kD, kTile / 16>(dq, ds, k_tile, 0, lane);  // dQ += dS K
  }

  // Each warp's Q rows are read by that warp alone: stage through them.
  const float scale = p.scale_log2 / flash::kLog2e;
  const int64_t row0 = q0 + 16 * warp;
  flash::StoreRows<kD>(dq, scale, scale, smem, 16 * warp,
                       dqkv + (int64_t(b) * p.seq + row0) * ts + int64_t(h) * kD, ts,
                       p.seq - row0, lane);
}

template <int kD>
absl::Status Launch(const AttentionParams& p, int64_t batch, const __nv_bfloat16* dout,
                    const __nv_bfloat16* out, const float* lse, __nv_bfloat16* dqkv,
                    float* scratch, cudaStream_t stream) {
  const int64_t seq_pad = PaddedSeq(p.seq);
  const int64_t rows = batch * p.heads * seq_pad;
  float* delta = scratch;
  float* lse2 = scratch + rows;
  constexpr int kPrepareThreads = 256;
  const int64_t prepare_blocks = (rows * 8 + kPrepareThreads - 1) / kPrepareThreads;
  AttentionBackwardPrepareKernel<kD><<<static_cast<unsigned>(prepare_blocks), kPrepareThreads, 0,
                                       stream>>>(p, batch, dout, out, lse, seq_pad, delta, lse2);
  CUDA_RETURN_IF_LAUNCH_FAILED();

  static std::atomic<uint64_t> kv_smem_allowed{0}, q_smem_allowed{0};
  CUDA_RETURN_IF_ERROR(flash::AllowDynamicSmem(AttentionBackwardKVKernel<kD>, KVSmemBytes<kD>(),
                                               kv_smem_allowed));
  CUDA_RETURN_IF_ERROR(
      flash::AllowDynamicSmem(AttentionBackwardQKernel<kD>, QSmemBytes<kD>(), q_smem_allowed));
  const unsigned tiles = static_cast<unsigned>(seq_pad / kTile);
  AttentionBackwardKVKernel<kD>
      <<<dim3(tiles, static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch)), kThreads,
         KVSmemBytes<kD>(), stream>>>(p, dout, delta, lse2, seq_pad, dqkv);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  AttentionBackwardQKernel<kD>
      <<<dim3(tiles, static_cast<unsigned>(p.heads), static_cast<unsigned>(batch)), kThreads,
         QSmemBytes<kD>(), stream>>>(p, dout, delta, lse2, seq_pad, dqkv);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace

// ---- launchers -------------------------------------------------------------

int64_t FlashAttentionBackwardScratchFloats(const AttentionShape& shape) {
  return 2 * shape.batch * shape.heads * PaddedSeq(shape.seq);
}

absl::Status LaunchFlashAttentionBackward(const AttentionShape& shape, const void* grad_out,
                                          const void* qkv, const void* out, const float* lse,
                                          void* grad_qkv, float* scratch, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  const AttentionParams p = flash::MakeAttentionParams(shape, qkv);
  auto* dout = static_cast<const __nv_bfloat16*>(grad_out);
  auto* o = static_cast<const __nv_bfloat16*>(out);
  auto* dqkv = static_cast<__nv_bfloat16*>(grad_qkv);
  switch (shape.head_dim) {
    case 64:
      return Launch<64>(p, shape.batch, dout, o, lse, dqkv, scratch, stream);
    case 128:
      return Launch<128>(p, shape.batch, dout, o, lse, dqkv, scratch, stream);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention: head dim ", shape.head_dim, " is not supported (64 or 128)"));
  }
}

}  // namespace cuda
}  // namespace tessera

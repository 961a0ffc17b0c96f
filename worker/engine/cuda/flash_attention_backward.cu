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
//     log2 domain, both padded to whole 128-row blocks (padding rows get
//     D = 0 and lse = +inf, so their P is exactly 0).
//  2. dK/dV: a block of 4 warps owns 64 (head dim 128) or 128 (head dim
//     64) keys of one K/V head, 16 or 32 per warp, and walks every query
//     tile at or after the diagonal, for every query head of the group,
//     accumulating dK and dV in registers. It computes the transposed products (S^T = K Q^T,
//     dP^T = V dO^T) so each warp's rows are its keys.
//  3. dQ: a block of 4 warps owns 128 queries of one head (32 per warp) and
//     walks the 32-key tiles up to the diagonal, recomputing S and dP. Recomputing is the
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

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// dK/dV kernel: 16 keys per warp and MMA row tile, 1 row tile per warp at
// head dim 128 (the dK and dV accumulators fill the registers), 2 at 64;
// query tiles of 64, processed in column chunks of 32.
constexpr int kTile = 64;
constexpr int kChunk = 32;
template <int kD>
constexpr int KVRowTiles() { return kD == 128 ? 1 : 2; }
template <int kD>
constexpr int KVBlock() { return 16 * KVRowTiles<kD>() * kWarps; }
// dQ kernel: 128 queries per block (32 per warp: kM = 2 MMA row tiles, so
// each K/V fragment read from shared memory feeds two products), key tiles
// of 32.
constexpr int kQBlock = 128;
constexpr int kWarpRows = kQBlock / kWarps;
constexpr int kM = kWarpRows / 16;
constexpr int kQKeys = 32;

// D and lse2 are padded to whole dQ blocks, so no kernel reads past them.
int64_t PaddedSeq(int64_t seq) { return (seq + kQBlock - 1) / kQBlock * kQBlock; }

template <int kD>
constexpr int KVSmemBytes() {
  // K, V, Q[2], dO[2]; lse2[2], D[2]
  return (2 * KVBlock<kD>() + 4 * kTile) * kD * 2 + 4 * kTile * 4;
}
template <int kD>
constexpr int QSmemBytes() {
  return (2 * kQBlock + 4 * kQKeys) * kD * 2;  // Q, dO, K[2], V[2]
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
  constexpr int kKM = KVRowTiles<kD>(), kBlockKV = 16 * kKM * kWarps;
  constexpr int kKVBytes = kBlockKV * kD * 2, kTileBytes = kTile * kD * 2;
  unsigned char* k_ptr = smem;
  unsigned char* v_ptr = smem + kKVBytes;
  const uint32_t s_k = flash::SmemAddress(k_ptr), s_v = s_k + kKVBytes;
  // Buffer i of Q is at s_q + i * kTileBytes, of dO at s_do + i * kTileBytes.
  const uint32_t s_q = s_k + 2 * kKVBytes, s_do = s_q + 2 * kTileBytes;
  float* s_lse = reinterpret_cast<float*>(smem + 2 * kKVBytes + 4 * kTileBytes);  // [2][kTile]
  float* s_delta = s_lse + 2 * kTile;                                            // [2][kTile]

  const int kv_block = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  const int64_t k0 = int64_t(kv_block) * kBlockKV;
  const int64_t warp_kv0 = k0 + 16 * kKM * warp;
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;

  flash::LoadTileAsync<kBlockKV, kD, kThreads>(
      s_k, batch + k0 * ts + int64_t(p.heads + kv_head) * kD, ts, p.seq - k0, p.qkv);
  flash::LoadTileAsync<kBlockKV, kD, kThreads>(
      s_v, batch + k0 * ts + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - k0, p.qkv);

  // Query tiles from the one holding key k0 to the last, for every query
  // head of the group.
  const int first_tile = static_cast<int>(k0 / kTile);
  const int per_head = static_cast<int>((p.seq + kTile - 1) / kTile) - first_tile;
  const int iterations = group * per_head;
  auto issue = [&](int it, int buf) {
    const int h = kv_head * group + it / per_head;
    const int64_t q0 = int64_t(first_tile + it % per_head) * kTile;
    flash::LoadTileAsync<kTile, kD, kThreads>(s_q + buf * kTileBytes,
                                              batch + q0 * ts + int64_t(h) * kD, ts, p.seq - q0,
                                              p.qkv);
    flash::LoadTileAsync<kTile, kD, kThreads>(
        s_do + buf * kTileBytes, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os,
        p.seq - q0, dout);
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

  float dk[kKM][kD / 8][4] = {}, dv[kKM][kD / 8][4] = {};
  for (int it = 0; it < iterations; ++it) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile `it` visible; every warp is done with tile it - 1
    if (it + 1 < iterations) issue(it + 1, (it + 1) & 1);
    flash::CommitAsyncCopies();
    const int buf = it & 1;
    const int64_t q0 = int64_t(first_tile + it % per_head) * kTile;
    const float* tile_lse = s_lse + buf * kTile;
    const float* tile_delta = s_delta + buf * kTile;
    const uint32_t q_tile = s_q + buf * kTileBytes, do_tile = s_do + buf * kTileBytes;

    // The query tile in column chunks of kChunk (the register budget).
#pragma unroll 1
    for (int c0 = 0; c0 < kTile; c0 += kChunk) {
      if (q0 + c0 + kChunk - 1 < warp_kv0) continue;  // every query precedes the warp's keys
      const bool diagonal = q0 + c0 < warp_kv0 + 16 * kKM - 1;
      // P^T = exp2(S^T scale_log2 - lse2[q]), zero where the query precedes the key.
      float pt[kKM][kChunk / 8][4] = {};
      flash::MmaABt<kD, kKM, kChunk / 8>(pt, s_k, 16 * kKM * warp, q_tile, c0, lane);
#pragma unroll
      for (int mt = 0; mt < kKM; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kChunk / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t + (e & 1);
            const int64_t key = warp_kv0 + 16 * mt + g + 8 * (e >> 1);
            float v = flash::FastExp2(pt[mt][nt][e] * p.scale_log2 - tile_lse[col]);
            if (diagonal && q0 + col < key) v = 0.f;
            pt[mt][nt][e] = v;
          }
        }
      }
      // dS^T = P^T (dP^T - D[q]) with dP^T = V dO^T.
      float ds[kKM][kChunk / 8][4] = {};
      flash::MmaABt<kD, kKM, kChunk / 8>(ds, s_v, 16 * kKM * warp, do_tile, c0, lane);
#pragma unroll
      for (int mt = 0; mt < kKM; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kChunk / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t + (e & 1);
            ds[mt][nt][e] = pt[mt][nt][e] * (ds[mt][nt][e] - tile_delta[col]);
          }
        }
      }
      flash::MmaPB<kD, kKM, kChunk / 16>(dv, pt, do_tile, c0, lane);  // dV += P^T dO
      flash::MmaPB<kD, kKM, kChunk / 16>(dk, ds, q_tile, c0, lane);   // dK += dS^T Q
    }
  }

  // Each warp's K and V rows are read by that warp alone: stage through them.
  const float scale = p.scale_log2 / flash::kLog2e;
#pragma unroll
  for (int mt = 0; mt < kKM; ++mt) {
    const int64_t row0 = warp_kv0 + 16 * mt;
    if (row0 >= p.seq) break;
    __nv_bfloat16* dst = dqkv + (int64_t(b) * p.seq + row0) * ts;
    flash::StoreRows<kD>(dk[mt], scale, scale, k_ptr, 16 * kKM * warp + 16 * mt,
                         dst + int64_t(p.heads + kv_head) * kD, ts, p.seq - row0, lane);
    flash::StoreRows<kD>(dv[mt], 1.f, 1.f, v_ptr, 16 * kKM * warp + 16 * mt,
                         dst + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - row0,
                         lane);
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardQKernel(AttentionParams p, const __nv_bfloat16* dout, const float* delta,
                             const float* lse2, int64_t seq_pad, __nv_bfloat16* dqkv) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kRowBytes = kD * 2;
  const uint32_t s_q = flash::SmemAddress(smem), s_do = s_q + kQBlock * kRowBytes;
  // Buffer i of K is at s_k + i * kKVBytes, of V at s_v + i * kKVBytes.
  constexpr int kKVBytes = kQKeys * kRowBytes;
  const uint32_t s_k = s_do + kQBlock * kRowBytes, s_v = s_k + 2 * kKVBytes;

  const int q_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  const int64_t q0 = int64_t(q_block) * kQBlock;
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;
  const __nv_bfloat16* k_src = batch + int64_t(p.heads + kv_head) * kD;
  const __nv_bfloat16* v_src = batch + int64_t(p.heads + p.kv_heads + kv_head) * kD;

  flash::LoadTileAsync<kQBlock, kD, kThreads>(s_q, batch + q0 * ts + int64_t(h) * kD, ts,
                                              p.seq - q0, p.qkv);
  flash::LoadTileAsync<kQBlock, kD, kThreads>(
      s_do, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os, p.seq - q0, dout);
  flash::LoadTileAsync<kQKeys, kD, kThreads>(s_k, k_src, ts, p.seq, p.qkv);
  flash::LoadTileAsync<kQKeys, kD, kThreads>(s_v, v_src, ts, p.seq, p.qkv);
  flash::CommitAsyncCopies();

  // lse2 and D of this lane's rows: [row tile][0: row g, 1: row g + 8].
  const int64_t warp_row0 = q0 + kWarpRows * warp;
  const int64_t stats = (int64_t(b) * p.heads + h) * seq_pad + warp_row0 + g;
  float row_lse[kM][2], row_delta[kM][2];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_lse[mt][half] = lse2[stats + 16 * mt + 8 * half];
      row_delta[mt][half] = delta[stats + 16 * mt + 8 * half];
    }
  }

  const int64_t last_row = min(q0 + kQBlock, p.seq) - 1;
  const int tiles = static_cast<int>(last_row / kQKeys) + 1;
  float dq[kM][kD / 8][4] = {};
  for (int j = 0; j < tiles; ++j) {
    flash::WaitAsyncCopies();
    __syncthreads();  // tile j visible; every warp is done with tile j - 1
    if (j + 1 < tiles) {
      const int64_t k0 = int64_t(j + 1) * kQKeys;
      const int buf = (j + 1) & 1;
      flash::LoadTileAsync<kQKeys, kD, kThreads>(s_k + buf * kKVBytes, k_src + k0 * ts, ts,
                                                 p.seq - k0, p.qkv);
      flash::LoadTileAsync<kQKeys, kD, kThreads>(s_v + buf * kKVBytes, v_src + k0 * ts, ts,
                                                 p.seq - k0, p.qkv);
    }
    flash::CommitAsyncCopies();
    const int64_t k0 = int64_t(j) * kQKeys;
    if (warp_row0 + kWarpRows - 1 < k0) continue;  // all of this tile is in the warp's future
    const bool diagonal = k0 + kQKeys - 1 > warp_row0;
    const uint32_t k_tile = s_k + (j & 1) * kKVBytes, v_tile = s_v + (j & 1) * kKVBytes;

    // P = exp2(S scale_log2 - lse2), zero where the key follows the query.
    float ps[kM][kQKeys / 8][4] = {};
    flash::MmaABt<kD, kM, kQKeys / 8>(ps, s_q, kWarpRows * warp, k_tile, 0, lane);
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kQKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = warp_row0 + 16 * mt + g + 8 * (e >> 1);
          float v = flash::FastExp2(ps[mt][nt][e] * p.scale_log2 - row_lse[mt][e >> 1]);
          if (diagonal && k0 + nt * 8 + 2 * t + (e & 1) > row) v = 0.f;
          ps[mt][nt][e] = v;
        }
      }
    }
    // dS = P (dP - D) with dP = dO V^T.
    float ds[kM][kQKeys / 8][4] = {};
    flash::MmaABt<kD, kM, kQKeys / 8>(ds, s_do, kWarpRows * warp, v_tile, 0, lane);
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kQKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ds[mt][nt][e] = ps[mt][nt][e] * (ds[mt][nt][e] - row_delta[mt][e >> 1]);
        }
      }
    }
    flash::MmaPB<kD, kM, kQKeys / 16>(dq, ds, k_tile, 0, lane);  // dQ += dS K
  }

  // Each warp's Q rows are read by that warp alone: stage through them.
  const float scale = p.scale_log2 / flash::kLog2e;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    const int64_t row0 = warp_row0 + 16 * mt;
    if (row0 >= p.seq) break;
    flash::StoreRows<kD>(dq[mt], scale, scale, smem, kWarpRows * warp + 16 * mt,
                         dqkv + (int64_t(b) * p.seq + row0) * ts + int64_t(h) * kD, ts,
                         p.seq - row0, lane);
  }
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
  const unsigned kv_blocks = static_cast<unsigned>((p.seq + KVBlock<kD>() - 1) / KVBlock<kD>());
  AttentionBackwardKVKernel<kD>
      <<<dim3(kv_blocks, static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch)),
         kThreads, KVSmemBytes<kD>(), stream>>>(p, dout, delta, lse2, seq_pad, dqkv);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  const unsigned q_blocks = static_cast<unsigned>(seq_pad / kQBlock);
  AttentionBackwardQKernel<kD>
      <<<dim3(q_blocks, static_cast<unsigned>(p.heads), static_cast<unsigned>(batch)), kThreads,
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

// Causal attention backward on Hopper tensor cores, FlashAttention style,
// with P recomputed from the forward's log-sum-exp (no S x S tensor
// anywhere) and every gradient element owned by exactly one thread block:
// no atomics, so the result is bit-identical run to run.
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
//  2. dK/dV: a block (one warpgroup) owns 64 keys of one K/V head and
//     walks every 64-query tile at or after the diagonal, for every query
//     head of the group, accumulating dK and dV in registers. It computes
//     the transposed products (S^T = K Q^T, dP^T = V dO^T, operands from
//     shared memory) so that the accumulator rows are its keys and P^T,
//     dS^T feed dV += P^T dO and dK += dS^T Q straight from registers.
//  3. dQ: a block (one warpgroup) owns 64 queries of one head and walks
//     the 64-key tiles up to the diagonal, recomputing S and dP;
//     dQ += dS K takes dS from registers. Recomputing is the price of
//     determinism: adding dQ from the dK/dV blocks needs atomics
//     (order-dependent sums), a T x T-sized buffer, or blocks that wait on
//     each other.
// Documents (packed sequences): a query's gradient flows only to keys of
// its own document. Prepare also writes each query's document start, padded
// like D and lse, so kernel 2 can copy a tile's starts with its lse and D.
// Kernel 2 stops at the last query tile whose first query's document
// starts at or before the block's last key (document starts never
// decrease along a sequence, so every later tile is wholly masked), and
// kernel 3 starts at the key tile holding its first query's document
// start. Between those ends, keys before a query's document start get
// P = 0 like future keys.
//
// Products are wgmma (wgmma.cuh); query/dO tiles (kernel 2) and K/V tiles
// (kernel 3) are double-buffered with cp.async. Two blocks share an SM and
// never wait for each other, so one's elementwise work overlaps the other's
// products.
//
// The launcher's static flags only record that the kernels' shared-memory
// limits were raised on a device; they choose no kernel or order.

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/flash_attention_backward_ordered.h"
#include "worker/engine/cuda/flash_attention_backward_tiles.cuh"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/wgmma.cuh"

namespace tessera {
namespace cuda {
namespace {

using flash::AttentionParams;

constexpr int kThreads = wgmma::kWarpgroupThreads;
// dK/dV kernel: 64 keys per block, query tiles of 64.
constexpr int kKVBlock = 64;
constexpr int kQTile = 64;
// dQ kernel: 64 queries per block, key tiles of 64.
constexpr int kQBlock = 64;
constexpr int kKeyTile = 64;

// D, lse2 and the document starts are padded to whole 128-row blocks, so
// no kernel reads past them.
int64_t PaddedSeq(int64_t seq) { return (seq + 127) / 128 * 128; }

template <int kD>
constexpr int KVSmemBytes() {
  // K, V, Q[2], dO[2]; lse2[2], D[2], document starts[2]; 1024-byte alignment
  return (2 * kKVBlock + 4 * kQTile) * kD * 2 + 6 * kQTile * 4 + 1024;
}
template <int kD>
constexpr int QSmemBytes() {
  return (2 * kQBlock + 4 * kKeyTile) * kD * 2 + 1024;  // Q, dO, K[2], V[2]
}

// ---- kernels ---------------------------------------------------------------

// delta[r] = dO_r . O_r and lse2[r] = lse_r * log2(e) for every padded row
// r = (b * heads + h) * seq_pad + s; 8 lanes per row. With documents, the
// rows of head 0 also write first_keys[b * seq_pad + s] (padding rows take
// the last row's, so the starts still never decrease).
template <int kD>
__global__ void AttentionBackwardPrepareKernel(AttentionParams p, int64_t batch,
                                               const __nv_bfloat16* dout,
                                               const __nv_bfloat16* out, const float* lse,
                                               int64_t seq_pad, float* delta, float* lse2,
                                               int32_t* first_keys) {
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
    if (p.doc_starts != nullptr && bh % p.heads == 0) {
      const int b = static_cast<int>(bh / p.heads);
      first_keys[int64_t(b) * seq_pad + s] = static_cast<int32_t>(flash::FirstKey(p, b, s));
    }
  }
}

// kDocuments (here and in the dQ kernel): built with the document mask or
// without it, so that whole sequences run the code they ran before
// documents existed (registers and occupancy included).
template <int kD, bool kDocuments>
// At head dim 64 the dK/dV kernel fits 168 registers without spilling, so
// three blocks share an SM instead of two (fwd+bwd at B 8, H 16, T 2048:
// 1.206 -> 1.150 ms on an H100); at 128 it needs about 254.
__global__ void __launch_bounds__(kThreads, kD == 64 ? 3 : 2)
    AttentionBackwardKVKernel(AttentionParams p, const __nv_bfloat16* dout, const float* delta,
                              const float* lse2, const int32_t* first_keys, int64_t seq_pad,
                              __nv_bfloat16* dqkv) {
#ifdef TESSERA_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::AlignedSmem(smem_raw);
  constexpr int kKVBytes = kKVBlock * kD * 2, kTileBytes = kQTile * kD * 2;
  unsigned char* k_ptr = smem;
  unsigned char* v_ptr = smem + kKVBytes;
  const uint32_t s_k = SmemAddress(k_ptr), s_v = s_k + kKVBytes;
  // Buffer i of Q is at s_q + i * kTileBytes, of dO at s_do + i * kTileBytes.
  const uint32_t s_q = s_k + 2 * kKVBytes, s_do = s_q + 2 * kTileBytes;
  float* s_lse = reinterpret_cast<float*>(smem + 2 * kKVBytes + 4 * kTileBytes);  // [2][kQTile]
  float* s_delta = s_lse + 2 * kQTile;                                            // [2][kQTile]
  int32_t* s_first_key = reinterpret_cast<int32_t*>(s_delta + 2 * kQTile);        // [2][kQTile]

  const int kv_block = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group_size = p.heads / p.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride;
  const int64_t k0 = int64_t(kv_block) * kKVBlock;
  const int64_t key_lo = k0 + 16 * warp + g;  // this lane's keys: key_lo and key_lo + 8
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;

  wgmma::LoadTileAsync<kKVBlock, kD, kThreads>(
      s_k, batch + k0 * ts + int64_t(p.heads + kv_head) * kD, ts, p.seq - k0, p.qkv);
  wgmma::LoadTileAsync<kKVBlock, kD, kThreads>(
      s_v, batch + k0 * ts + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - k0, p.qkv);

  // Query tiles from the one holding key k0 to the last (with documents, to
  // the last whose first query's document starts at or before the block's
  // last key), for every query head of the group.
  constexpr bool documents = kDocuments;
  const int first_tile = static_cast<int>(k0 / kQTile);
  int end_tile = static_cast<int>((p.seq + kQTile - 1) / kQTile);
  if (documents) {
    const int64_t last_key = min(k0 + kKVBlock, p.seq) - 1;
    const int32_t* starts = first_keys + int64_t(b) * seq_pad;
    int lo = first_tile, hi = end_tile - 1;  // starts[lo * kQTile] <= last_key holds
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (starts[int64_t(mid) * kQTile] <= last_key) lo = mid; else hi = mid - 1;
    }
    end_tile = lo + 1;
  }
  const int per_head = end_tile - first_tile;
  const int iterations = group_size * per_head;
  auto issue = [&](int it, int buf) {
    const int h = kv_head * group_size + it / per_head;
    const int64_t q0 = int64_t(first_tile + it % per_head) * kQTile;
    flash::LoadQueryTileAsync<kQTile, kD, kThreads, documents>(
        p, b, h, q0, dout, lse2, delta, first_keys, seq_pad,
        {s_q + buf * kTileBytes, s_do + buf * kTileBytes, s_lse + buf * kQTile,
         s_delta + buf * kQTile, s_first_key + buf * kQTile});
  };
  issue(0, 0);
  CommitAsyncCopies();

  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int it = 0; it < iterations; ++it) {
    WaitAsyncCopies();
    wgmma::ProxyFence();
    __syncthreads();  // tile `it` visible; every warp is done with tile it - 1
    if (it + 1 < iterations) issue(it + 1, (it + 1) & 1);
    CommitAsyncCopies();
    const int buf = it & 1;
    const int64_t q0 = int64_t(first_tile + it % per_head) * kQTile;
    const bool diagonal = q0 < k0 + kKVBlock - 1;
    const float* tile_lse = s_lse + buf * kQTile;
    const float* tile_delta = s_delta + buf * kQTile;
    const int32_t* tile_first_key = s_first_key + buf * kQTile;
    // Some query of the tile starts its document after key k0.
    const bool doc_edge = documents && tile_first_key[kQTile - 1] > k0;
    const uint32_t q_tile = s_q + buf * kTileBytes, do_tile = s_do + buf * kTileBytes;

    // P^T and dS^T for the block's 64 keys: zero where the query precedes
    // the key or its document starts after the key.
    uint32_t pa[kQTile / 16][4], dsa[kQTile / 16][4];
    flash::KeyRowsFragments<kD, kKVBlock, kQTile>(s_k, s_v, 0, q_tile, do_tile, key_lo, q0,
                                                  diagonal, doc_edge, tile_lse, tile_delta,
                                                  tile_first_key, p.scale_log2, t, pa, dsa);
    // dV += P^T dO and dK += dS^T Q: the tiles' rows are the contraction.
    wgmma::Fence();
    wgmma::MmaFragmentsTimesTile<kD, kQTile>(dv, pa, do_tile);
    wgmma::MmaFragmentsTimesTile<kD, kQTile>(dk, dsa, q_tile);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceOperands(dv);
    wgmma::FenceOperands(dk);
  }
  __syncthreads();  // K and V are no longer read: they stage the gradients

  flash::StoreKeyGradients<kD>(p, b, kv_head, k0 + 16 * warp, dk, dv, k_ptr, v_ptr, 16 * warp,
                               dqkv, lane);
#else
  __trap();
#endif
}

template <int kD, bool kDocuments>
__global__ void __launch_bounds__(kThreads, 2)
    AttentionBackwardQKernel(AttentionParams p, const __nv_bfloat16* dout, const float* delta,
                             const float* lse2, int64_t seq_pad, __nv_bfloat16* dqkv) {
#ifdef TESSERA_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::AlignedSmem(smem_raw);
  constexpr int kBlockBytes = kQBlock * kD * 2, kTileBytes = kKeyTile * kD * 2;
  const uint32_t s_q = SmemAddress(smem), s_do = s_q + kBlockBytes;
  // Buffer i of K is at s_k + i * kTileBytes, of V at s_v + i * kTileBytes.
  const uint32_t s_k = s_do + kBlockBytes, s_v = s_k + 2 * kTileBytes;

  const int q_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  const int64_t q0 = int64_t(q_block) * kQBlock;
  const int64_t row_lo = q0 + 16 * warp + g;  // this lane's rows: row_lo and row_lo + 8
  const __nv_bfloat16* batch = p.qkv + int64_t(b) * p.seq * ts;
  const __nv_bfloat16* k_src = batch + int64_t(p.heads + kv_head) * kD;
  const __nv_bfloat16* v_src = batch + int64_t(p.heads + p.kv_heads + kv_head) * kD;

  wgmma::LoadTileAsync<kQBlock, kD, kThreads>(s_q, batch + q0 * ts + int64_t(h) * kD, ts,
                                              p.seq - q0, p.qkv);
  // Key tiles [first_tile, end_tile): from the first query's document start
  // (0 without documents) to the diagonal.
  const int64_t last_row = min(q0 + kQBlock, p.seq) - 1;
  const int first_tile = static_cast<int>(flash::FirstKey<kDocuments>(p, b, q0) / kKeyTile);
  const int end_tile = static_cast<int>(last_row / kKeyTile) + 1;
  const int64_t last_first_key = flash::FirstKey<kDocuments>(p, b, last_row);
  // 32 bits: a sequence is far shorter than 2^31 tokens (the ops API's
  // checks), and 64-bit masks cost the masked build registers.
  const int32_t first_key[2] = {static_cast<int32_t>(flash::FirstKey<kDocuments>(p, b, row_lo)),
                                static_cast<int32_t>(flash::FirstKey<kDocuments>(p, b, row_lo + 8))};
  const int64_t first_k0 = int64_t(first_tile) * kKeyTile;

  wgmma::LoadTileAsync<kQBlock, kD, kThreads>(
      s_do, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os, p.seq - q0, dout);
  wgmma::LoadTileAsync<kKeyTile, kD, kThreads>(s_k, k_src + first_k0 * ts, ts, p.seq - first_k0,
                                               p.qkv);
  wgmma::LoadTileAsync<kKeyTile, kD, kThreads>(s_v, v_src + first_k0 * ts, ts, p.seq - first_k0,
                                               p.qkv);
  CommitAsyncCopies();

  const int64_t stats = (int64_t(b) * p.heads + h) * seq_pad + row_lo;
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_lse[half] = lse2[stats + 8 * half];
    row_delta[half] = delta[stats + 8 * half];
  }

  float dq[kD / 8][4] = {};
  for (int j = first_tile; j < end_tile; ++j) {
    const int it = j - first_tile;  // buffer it & 1 holds tile j
    WaitAsyncCopies();
    wgmma::ProxyFence();
    __syncthreads();  // tile j visible; every warp is done with tile j - 1
    if (j + 1 < end_tile) {
      const int64_t k0 = int64_t(j + 1) * kKeyTile;
      const int buf = (it + 1) & 1;
      wgmma::LoadTileAsync<kKeyTile, kD, kThreads>(s_k + buf * kTileBytes, k_src + k0 * ts, ts,
                                                   p.seq - k0, p.qkv);
      wgmma::LoadTileAsync<kKeyTile, kD, kThreads>(s_v + buf * kTileBytes, v_src + k0 * ts, ts,
                                                   p.seq - k0, p.qkv);
    }
    CommitAsyncCopies();
    const int64_t k0 = int64_t(j) * kKeyTile;
    const bool diagonal = k0 + kKeyTile - 1 > q0;
    const bool doc_edge = kDocuments && k0 < last_first_key;
    // Columns of this tile before each of the lane's rows' document start.
    const int32_t before[2] = {first_key[0] - static_cast<int32_t>(k0),
                               first_key[1] - static_cast<int32_t>(k0)};
    const uint32_t k_tile = s_k + (it & 1) * kTileBytes, v_tile = s_v + (it & 1) * kTileBytes;

    // S = Q K^T and dP = dO V^T for the block's 64 queries.
    float ps[kKeyTile / 8][4], ds[kKeyTile / 8][4];
    wgmma::Fence();
    wgmma::MmaRowsTimesRowsT<kD, kQBlock, kKeyTile>(ps, s_q, 0, k_tile);
    wgmma::Commit();
    wgmma::MmaRowsTimesRowsT<kD, kQBlock, kKeyTile>(ds, s_do, 0, v_tile);
    wgmma::Commit();

    // P = exp2(S scale_log2 - lse2), zero where the key follows the query
    // or precedes its document.
    wgmma::Wait<1>();
    wgmma::FenceOperands(ps);
#pragma unroll
    for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = flash::FastExp2(ps[nt][e] * p.scale_log2 - row_lse[e >> 1]);
        if (diagonal && k0 + nt * 8 + 2 * t + (e & 1) > row_lo + 8 * (e >> 1)) v = 0.f;
        const int col = nt * 8 + 2 * t + (e & 1);
        if (doc_edge && col < before[e >> 1]) v = 0.f;
        ps[nt][e] = v;
      }
    }
    // dS = P (dP - D), then dQ += dS K (K's rows are the contraction).
    wgmma::Wait<0>();
    wgmma::FenceOperands(ds);
    uint32_t dsa[kKeyTile / 16][4];
#pragma unroll
    for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = ps[nt][e] * (ds[nt][e] - row_delta[e >> 1]);
    }
#pragma unroll
    for (int kt = 0; kt < kKeyTile / 16; ++kt) wgmma::PackA(ds, kt, dsa[kt]);
    wgmma::Fence();
    wgmma::MmaFragmentsTimesTile<kD, kKeyTile>(dq, dsa, k_tile);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceOperands(dq);
  }
  __syncthreads();  // Q is no longer read: it stages the gradient

  const float scale = p.scale_log2 / flash::kLog2e;
  const int64_t row0 = q0 + 16 * warp;
  if (row0 < p.seq) {
    flash::StoreRows<kD>(dq, scale, scale, smem, 16 * warp,
                         dqkv + (int64_t(b) * p.seq + row0) * ts + int64_t(h) * kD, ts,
                         p.seq - row0, lane);
  }
#else
  __trap();
#endif
}

// Kernels 2 and 3, built with or without the document mask.
template <int kD, bool kDocuments>
absl::Status LaunchGradients(const AttentionParams& p, int64_t batch, const __nv_bfloat16* dout,
                             const float* delta, const float* lse2, const int32_t* first_keys,
                             int64_t seq_pad, __nv_bfloat16* dqkv, cudaStream_t stream) {
  static std::atomic<uint64_t> kv_smem_allowed{0}, q_smem_allowed{0};
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(AttentionBackwardKVKernel<kD, kDocuments>,
                                        KVSmemBytes<kD>(), kv_smem_allowed));
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(AttentionBackwardQKernel<kD, kDocuments>,
                                        QSmemBytes<kD>(), q_smem_allowed));
  const unsigned kv_blocks = static_cast<unsigned>((p.seq + kKVBlock - 1) / kKVBlock);
  AttentionBackwardKVKernel<kD, kDocuments>
      <<<dim3(kv_blocks, static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch)),
         kThreads, KVSmemBytes<kD>(), stream>>>(p, dout, delta, lse2, first_keys, seq_pad,
                                                dqkv);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  const unsigned q_blocks = static_cast<unsigned>((p.seq + kQBlock - 1) / kQBlock);
  AttentionBackwardQKernel<kD, kDocuments>
      <<<dim3(q_blocks, static_cast<unsigned>(p.heads), static_cast<unsigned>(batch)), kThreads,
         QSmemBytes<kD>(), stream>>>(p, dout, delta, lse2, seq_pad, dqkv);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

// The one-pass forms run at the head dims the kernels take (64 and 128).
bool RunsOnePass(const AttentionShape& shape, FlashBackwardForm form) {
  return form != FlashBackwardForm::kTwoPass && (shape.head_dim == 64 || shape.head_dim == 128);
}

template <int kD>
absl::Status Launch(const AttentionParams& p, int64_t batch, const __nv_bfloat16* dout,
                    const __nv_bfloat16* out, const float* lse, __nv_bfloat16* dqkv,
                    float* scratch, bool one_pass, bool ordered, int sm_count,
                    cudaStream_t stream) {
  const int64_t seq_pad = PaddedSeq(p.seq);
  const int64_t rows = batch * p.heads * seq_pad;
  float* delta = scratch;
  float* lse2 = scratch + rows;
  int32_t* first_keys =
      p.doc_starts != nullptr ? reinterpret_cast<int32_t*>(scratch + 2 * rows) : nullptr;
  constexpr int kPrepareThreads = 256;
  const int64_t prepare_blocks = (rows * 8 + kPrepareThreads - 1) / kPrepareThreads;
  AttentionBackwardPrepareKernel<kD><<<static_cast<unsigned>(prepare_blocks), kPrepareThreads, 0,
                                       stream>>>(p, batch, dout, out, lse, seq_pad, delta, lse2,
                                                                first_keys);
  CUDA_RETURN_IF_LAUNCH_FAILED();

  if (one_pass) {
    return LaunchOrderedAttentionGradients(p, batch, kD, dout, delta, lse2, first_keys, seq_pad,
                                           ordered, sm_count,
                                           scratch + (2 * p.heads + 1) * batch * seq_pad, dqkv,
                                           stream);
  }
  return p.doc_starts != nullptr
             ? LaunchGradients<kD, true>(p, batch, dout, delta, lse2, first_keys, seq_pad, dqkv,
                                         stream)
             : LaunchGradients<kD, false>(p, batch, dout, delta, lse2, first_keys, seq_pad, dqkv,
                                          stream);
}

}  // namespace

// ---- launchers -------------------------------------------------------------

int64_t FlashAttentionBackwardScratchFloats(const AttentionShape& shape,
                                            FlashBackwardForm form) {
  // D and lse2 per head and padded query; one int32 document start per
  // padded query (used only with documents); then the ordered form's.
  const int64_t seq_pad = PaddedSeq(shape.seq);
  const int64_t prepare = (2 * shape.heads + 1) * shape.batch * seq_pad;
  return prepare + (RunsOnePass(shape, form)
                        ? OrderedAttentionScratchFloats(shape.batch, shape.heads, shape.head_dim,
                                                        seq_pad)
                        : 0);
}

absl::Status LaunchFlashAttentionBackward(const AttentionShape& shape, const void* grad_out,
                                          const void* qkv, const int32_t* doc_starts,
                                          const void* out, const float* lse, void* grad_qkv,
                                          float* scratch, FlashBackwardForm form,
                                          int sm_count, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  const bool one_pass = RunsOnePass(shape, form);
  const bool ordered = form == FlashBackwardForm::kOrderedDq;
  const AttentionParams p = flash::MakeAttentionParams(shape, qkv, doc_starts);
  auto* dout = static_cast<const __nv_bfloat16*>(grad_out);
  auto* o = static_cast<const __nv_bfloat16*>(out);
  auto* dqkv = static_cast<__nv_bfloat16*>(grad_qkv);
  switch (shape.head_dim) {
    case 64:
      return Launch<64>(p, shape.batch, dout, o, lse, dqkv, scratch, one_pass, ordered,
                        sm_count, stream);
    case 128:
      return Launch<128>(p, shape.batch, dout, o, lse, dqkv, scratch, one_pass, ordered,
                         sm_count, stream);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention: head dim ", shape.head_dim, " is not supported (64 or 128)"));
  }
}

}  // namespace cuda
}  // namespace tessera

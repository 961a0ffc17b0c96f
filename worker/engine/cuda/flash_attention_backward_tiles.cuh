// What the two attention backward forms' key-block kernels share
// (flash_attention_backward.cu's dK/dV kernel and the one-pass kernel of
// flash_attention_backward_ordered.cu): starting the copies of one query
// tile (Q, dO, lse2, D and, with documents, the queries' document starts)
// into a double buffer, and one warpgroup's step from a query tile to P^T
// and dS^T (rows: its keys, columns: the tile's queries) as the bf16
// fragments of the dV and dK products, and writing a warp's dK and dV rows.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_TILES_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_TILES_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/wgmma.cuh"

namespace tessera {
namespace cuda {
namespace flash {

// Where one buffer of a query tile goes in shared memory.
struct QueryTileBuffer {
  uint32_t q, dout;      // kQTile x kD bf16 tiles (wgmma layout)
  float* lse2;           // [kQTile]
  float* delta;          // [kQTile]
  int32_t* first_key;    // [kQTile], written with documents only
};

// Starts copying query tile [q0, q0 + kQTile) of head h of sequence b (rows
// past the sequence zero-filled; lse2, D and the starts are padded to
// seq_pad rows by the prepare kernel). Every thread of the block calls it;
// the caller commits.
template <int kQTile, int kD, int kThreads, bool kDocuments>
__device__ __forceinline__ void LoadQueryTileAsync(const AttentionParams& p, int b, int h,
                                                   int64_t q0, const __nv_bfloat16* dout,
                                                   const float* lse2, const float* delta,
                                                   const int32_t* first_keys, int64_t seq_pad,
                                                   const QueryTileBuffer& to) {
  const int64_t ts = p.qkv_token_stride, os = p.out_token_stride;
  wgmma::LoadTileAsync<kQTile, kD, kThreads>(
      to.q, p.qkv + (int64_t(b) * p.seq + q0) * ts + int64_t(h) * kD, ts, p.seq - q0, p.qkv);
  wgmma::LoadTileAsync<kQTile, kD, kThreads>(
      to.dout, dout + (int64_t(b) * p.seq + q0) * os + int64_t(h) * kD, os, p.seq - q0, dout);
  const int64_t stats = (int64_t(b) * p.heads + h) * seq_pad + q0;
  if (threadIdx.x < 2 * kQTile / 4) {  // 16 threads copy lse2, 16 copy delta
    const int c = threadIdx.x % (kQTile / 4);
    const bool is_lse = threadIdx.x < kQTile / 4;
    const float* src = (is_lse ? lse2 : delta) + stats + 4 * c;
    float* dst = (is_lse ? to.lse2 : to.delta) + 4 * c;
    CopyAsync16(SmemAddress(dst), src, 16);
  } else if (kDocuments && threadIdx.x < 3 * kQTile / 4) {  // 16 copy the document starts
    const int c = threadIdx.x - 2 * kQTile / 4;
    CopyAsync16(SmemAddress(to.first_key + 4 * c), first_keys + int64_t(b) * seq_pad + q0 + 4 * c,
                16);
  }
}

// P^T = exp2(S^T scale_log2 - lse2[q]) in place; with kMask, zero where the
// query precedes the key (tested on a `diagonal` tile) or its document
// starts after the key (on a `doc_edge` tile). This lane's keys are key_lo
// and key_lo + 8; t is the lane's column pair within 8 columns. Each lse2
// pair is one 8-byte load.
template <int kQTile, bool kMask>
__device__ __forceinline__ void KeyRowsProbabilitiesStep(float (&pt)[kQTile / 8][4],
                                                         int64_t key_lo, int64_t q0,
                                                         bool diagonal, bool doc_edge,
                                                         const float* tile_lse,
                                                         const int32_t* tile_first_key,
                                                         float scale_log2, int t) {
  // For each of the lane's two keys, the first column (query) that sees
  // it, in 32 bits; none is hidden off the diagonal.
  const int32_t first_seeing_col[2] = {
      diagonal ? static_cast<int32_t>(key_lo - q0) : 0,
      diagonal ? static_cast<int32_t>(key_lo + 8 - q0) : 0};
#pragma unroll
  for (int nt = 0; nt < kQTile / 8; ++nt) {
    const float2 lse = *reinterpret_cast<const float2*>(tile_lse + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nt * 8 + 2 * t + (e & 1);
      float v = FastExp2(pt[nt][e] * scale_log2 - ((e & 1) ? lse.y : lse.x));
      if constexpr (kMask) {
        const int64_t key = key_lo + 8 * (e >> 1);
        if (col < first_seeing_col[e >> 1]) v = 0.f;
        if (doc_edge && tile_first_key[col] > static_cast<int32_t>(key)) v = 0.f;
      }
      pt[nt][e] = v;
    }
  }
}

template <int kQTile>
__device__ __forceinline__ void KeyRowsProbabilities(float (&pt)[kQTile / 8][4], int64_t key_lo,
                                                     int64_t q0, bool diagonal, bool doc_edge,
                                                     const float* tile_lse,
                                                     const int32_t* tile_first_key,
                                                     float scale_log2, int t) {
  if (diagonal || doc_edge) {
    KeyRowsProbabilitiesStep<kQTile, true>(pt, key_lo, q0, diagonal, doc_edge, tile_lse,
                                           tile_first_key, scale_log2, t);
  } else {
    KeyRowsProbabilitiesStep<kQTile, false>(pt, key_lo, q0, diagonal, doc_edge, tile_lse,
                                            tile_first_key, scale_log2, t);
  }
}

// dS^T = P^T (dP^T - D[q]) in place of dP^T (each D pair one 8-byte load).
template <int kQTile>
__device__ __forceinline__ void KeyRowsScoreGrads(float (&dst)[kQTile / 8][4],
                                                  const float (&pt)[kQTile / 8][4],
                                                  const float* tile_delta, int t) {
#pragma unroll
  for (int nt = 0; nt < kQTile / 8; ++nt) {
    const float2 delta = *reinterpret_cast<const float2*>(tile_delta + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dst[nt][e] = pt[nt][e] * (dst[nt][e] - ((e & 1) ? delta.y : delta.x));
    }
  }
}

// One warpgroup's step from a query tile to the A fragments of P^T and
// dS^T: S^T = K Q^T and dP^T = V dO^T for the 64 keys from row k_row0 of the
// K and V tiles (kKeyRows rows each), then KeyRowsProbabilities,
// KeyRowsScoreGrads and bf16 packing. Issues, commits and waits for its own
// products; key_lo, q0, diagonal, doc_edge and t as KeyRowsProbabilities.
template <int kD, int kKeyRows, int kQTile>
__device__ __forceinline__ void KeyRowsFragments(
    uint32_t k_tile, uint32_t v_tile, int k_row0, uint32_t q_tile, uint32_t do_tile,
    int64_t key_lo, int64_t q0, bool diagonal, bool doc_edge, const float* tile_lse,
    const float* tile_delta, const int32_t* tile_first_key, float scale_log2, int t,
    uint32_t (&pa)[kQTile / 16][4], uint32_t (&dsa)[kQTile / 16][4]) {
  float pt[kQTile / 8][4], dst[kQTile / 8][4];
  wgmma::Fence();
  wgmma::MmaRowsTimesRowsT<kD, kKeyRows, kQTile>(pt, k_tile, k_row0, q_tile);
  wgmma::Commit();
  wgmma::MmaRowsTimesRowsT<kD, kKeyRows, kQTile>(dst, v_tile, k_row0, do_tile);
  wgmma::Commit();
  wgmma::Wait<1>();
  wgmma::FenceOperands(pt);
  KeyRowsProbabilities<kQTile>(pt, key_lo, q0, diagonal, doc_edge, tile_lse, tile_first_key,
                               scale_log2, t);
  wgmma::Wait<0>();
  wgmma::FenceOperands(dst);
  KeyRowsScoreGrads<kQTile>(dst, pt, tile_delta, t);
#pragma unroll
  for (int kt = 0; kt < kQTile / 16; ++kt) {
    wgmma::PackA(pt, kt, pa[kt]);
    wgmma::PackA(dst, kt, dsa[kt]);
  }
}

// Writes a warp's 16 rows of dK (times the softmax scale) and dV, keys
// [row0, row0 + 16) of K/V head kv_head of sequence b, into dqkv; rows past
// the sequence are skipped. Staged through rows [stage_row, stage_row + 16)
// of the shared-memory tiles at k_stage and v_stage (StoreRows).
template <int kD>
__device__ __forceinline__ void StoreKeyGradients(const AttentionParams& p, int b, int kv_head,
                                                  int64_t row0, const float (&dk)[kD / 8][4],
                                                  const float (&dv)[kD / 8][4],
                                                  unsigned char* k_stage, unsigned char* v_stage,
                                                  int stage_row, __nv_bfloat16* dqkv, int lane) {
  if (row0 >= p.seq) return;
  const int64_t ts = p.qkv_token_stride;
  const float scale = p.scale_log2 / kLog2e;
  __nv_bfloat16* dst_row = dqkv + (int64_t(b) * p.seq + row0) * ts;
  StoreRows<kD>(dk, scale, scale, k_stage, stage_row, dst_row + int64_t(p.heads + kv_head) * kD,
                ts, p.seq - row0, lane);
  StoreRows<kD>(dv, 1.f, 1.f, v_stage, stage_row,
                dst_row + int64_t(p.heads + p.kv_heads + kv_head) * kD, ts, p.seq - row0, lane);
}

}  // namespace flash
}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_BACKWARD_TILES_CUH_

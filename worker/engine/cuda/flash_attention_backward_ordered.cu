// Causal attention backward at head dim 128 in one pass: each thread block
// owns 128 keys of one K/V head, computes their dK and dV, and adds its part
// of every query tile's dQ into an fp32 sum in a fixed order, so the result
// is bit-identical run to run without recomputing S and dP for dQ (the
// two-pass form in flash_attention_backward.cu recomputes them: seven
// products per tile instead of five).
//
// Warps. A block is three warpgroups. The first is the producer: one thread
// copies K and V once and then each query tile (Q, dO, lse2, D and, with
// documents, the queries' document starts) into a ring of three stages with
// TMA (attention_tensor_maps.h, tma.cuh), and the warpgroup gives most of
// its registers to the other two, the consumers, which only compute. A
// consumer hands a stage back as soon as its products have read it; the
// consumers meet at one named barrier per tile (both halves of dS^T
// written), not at block-wide ones.
//
// The two consumer warpgroups each hold 64 of the block's keys. For each
// query tile (64 queries; the tiles from the last one down to the block's
// diagonal) and each query head of the group, a warpgroup computes
// S^T = K Q^T and dP^T = V dO^T for its keys, P^T from the saved lse and
// dS^T = P^T (dP^T - D), then dV += P^T dO and dK += dS^T Q from registers,
// as the two-pass dK/dV kernel does. Both warpgroups also leave dS^T in
// shared memory, and each then multiplies the whole 64 x 128 dS by its half
// of K's columns: the block's part of the tile's dQ, 64 x 128 in fp32.
//
// Order. The blocks that see query tile m are the key blocks n from
// tile_first_block[m] (0 without documents) to the one holding the tile's
// last query. Block n waits until the tile's turn counter reads n, adds its
// part to the tile's fp32 sum (the first block stores it), and hands the
// turn to n + 1; the last block adds its part in registers to the sum it
// reads back and writes dQ as bf16. Every element is so summed in key-block
// order, on every run. A block only ever waits for the block before it in
// the grid, which the GPU starts first, so the wait always ends. Blocks walk
// their tiles from the last one down, the heads of a group innermost, so
// that neighbouring blocks reach each tile at nearly the same time.
//
// Documents: a tile's first block comes from the document start of its
// first query. tile_first_block is the suffix minimum of those (the tiny
// kernel below), which is the value itself for documents that never start
// earlier than an earlier one does, and keeps both a block's tiles and a
// tile's blocks contiguous for starts of any content, so no block waits for
// a block that never comes. Inside a tile, keys before a query's own
// document start get P = 0 as in the two-pass kernels.
//
// Scratch (after the two-pass kernels' D, lse2 and document starts): the dQ
// sums [B, heads, S padded to 128, 128] fp32, the turn counters (zeroed by
// the launcher before each call) and the tiles' first blocks.

#include <cuda_bf16.h>

#include "worker/engine/cuda/attention_tensor_maps.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/flash_attention_backward_ordered.h"
#include "worker/engine/cuda/flash_attention_backward_tiles.cuh"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/tma.cuh"
#include "worker/engine/cuda/wgmma.cuh"

namespace tessera {
namespace cuda {
namespace {

using flash::AttentionParams;

constexpr int kD = 128;
constexpr int kConsumers = 2;  // warpgroups of 64 keys
constexpr int kThreads = (1 + kConsumers) * wgmma::kWarpgroupThreads;  // + the producer
constexpr int kConsumerThreads = kConsumers * wgmma::kWarpgroupThreads;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kKeyBlock = 64 * kConsumers;
constexpr int kQTile = 64;
constexpr int kStages = 3;  // query tiles in flight
using QueryRing = tma::Ring<kStages>;
// Registers per thread after the hand-over (24 x 128 + 240 x 256 fits).
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(tma::HandOverFits(kProducerRegisters, 2, kConsumerRegisters),
              "the consumers would wait forever for registers");
// Named barriers over the consumers: both dS^T written (and, at the end,
// every product finished); a tile's turn has come.
constexpr int kConsumersBarrier = 1;
constexpr int kTurnBarrier = 2;

constexpr int kKVBytes = kKeyBlock * kD * 2;
constexpr int kTileBytes = kQTile * kD * 2;
constexpr int kDsBytes = kKeyBlock * kQTile * 2;
constexpr int kStatsBytes = kQTile * 4;
// Shared memory from the 1024-byte aligned base: K, V, Q[stages],
// dO[stages], dS^T[2], per stage lse2, D and document starts, barriers.
constexpr int kKOffset = 0;
constexpr int kVOffset = kKOffset + kKVBytes;
constexpr int kQOffset = kVOffset + kKVBytes;
constexpr int kDoutOffset = kQOffset + kStages * kTileBytes;
constexpr int kDsOffset = kDoutOffset + kStages * kTileBytes;
constexpr int kStatsOffset = kDsOffset + 2 * kDsBytes;
constexpr int kBarrierOffset = kStatsOffset + 3 * kStages * kStatsBytes;
constexpr int kSmemBytes = kBarrierOffset + 8 * (1 + 2 * kStages) + 1024;

struct Barriers {
  uint32_t base;
  __device__ uint32_t kv_full() const { return base; }
  __device__ uint32_t full(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t empty(int s) const { return base + 8 * (1 + kStages + s); }
};

#ifdef TESSERA_WGMMA
__device__ __forceinline__ int LoadAcquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(int32_t* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void AddFour(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}
#endif

// tile_first_block[b][m] = min over tiles m' >= m of (document start of
// tile m''s first query) / kKeyBlock. One block per sequence: the starts are
// read in parallel, and one thread runs the minimum from the end.
__global__ void TileFirstBlocksKernel(const int32_t* first_keys, int64_t seq_pad, int tiles,
                                      int32_t* tile_first_block) {
  extern __shared__ int32_t s_blocks[];
  const int64_t b = blockIdx.x;
  for (int m = threadIdx.x; m < tiles; m += blockDim.x) {
    s_blocks[m] = first_keys[b * seq_pad + int64_t(m) * kQTile] / kKeyBlock;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t running = s_blocks[tiles - 1];
    for (int m = tiles - 1; m >= 0; --m) {
      running = min(running, s_blocks[m]);
      s_blocks[m] = running;
    }
  }
  __syncthreads();
  for (int m = threadIdx.x; m < tiles; m += blockDim.x) {
    tile_first_block[b * tiles + m] = s_blocks[m];
  }
}

template <bool kDocuments>
__global__ void __launch_bounds__(kThreads, 1)
    AttentionBackwardOrderedKernel(const __grid_constant__ CUtensorMap kv_map,
                                   const __grid_constant__ CUtensorMap q_map,
                                   const __grid_constant__ CUtensorMap dout_map,
                                   AttentionParams p, const float* delta, const float* lse2,
                                   const int32_t* first_keys, const int32_t* tile_first_block,
                                   int64_t seq_pad, float* dq_sums, int32_t* dq_turns,
                                   __nv_bfloat16* dqkv) {
#ifdef TESSERA_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::AlignedSmem(smem_raw);
  const uint32_t base = SmemAddress(smem);
  const uint32_t s_k = base + kKOffset, s_v = base + kVOffset;
  const Barriers bar{base + kBarrierOffset};
  auto q_tile = [&](int s) { return base + kQOffset + s * kTileBytes; };
  auto do_tile = [&](int s) { return base + kDoutOffset + s * kTileBytes; };
  // Per stage: lse2, D and (documents) the queries' document starts.
  auto stats = [&](int s, int which) { return smem + kStatsOffset + (3 * s + which) * kStatsBytes; };

  // Longest blocks first across the K/V heads: block n of every head
  // before block n + 1 of any, so the long blocks do not end the grid.
  const int kv_head = blockIdx.x % p.kv_heads, n = blockIdx.x / p.kv_heads, b = blockIdx.y;
  const int group_size = p.heads / p.kv_heads;
  const int64_t ts = p.qkv_token_stride;
  const int64_t k0 = int64_t(n) * kKeyBlock;
  const int tiles = static_cast<int>(seq_pad / kQTile);

  // This block's query tiles: [2n, end_tile), walked from the top.
  const int first_tile = 2 * n;
  int end_tile = static_cast<int>((p.seq + kQTile - 1) / kQTile);
  const int32_t* first_blocks = kDocuments ? tile_first_block + int64_t(b) * tiles : nullptr;
  if (kDocuments) {
    int lo = first_tile, hi = end_tile - 1;  // first_blocks[lo] <= n holds
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first_blocks[mid] <= n) lo = mid; else hi = mid - 1;
    }
    end_tile = lo + 1;
  }
  const int iterations = (end_tile - first_tile) * group_size;
  auto tile_of = [&](int it) { return end_tile - 1 - it / group_size; };
  auto head_of = [&](int it) { return kv_head * group_size + it % group_size; };

  if (threadIdx.x == 0) {
    tma::InitBarrier(bar.kv_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      tma::InitBarrier(bar.full(s), 1);
      tma::InitBarrier(bar.empty(s), kConsumerWarps);
    }
    tma::FenceBarrierInit();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / wgmma::kWarpgroupThreads;
  if (warpgroup == 0) {
    // ---- producer: K and V once, then each query tile into the ring ----
    tma::ShrinkRegisters<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::PrefetchMap(&kv_map);
      tma::PrefetchMap(&q_map);
      tma::PrefetchMap(&dout_map);
      const int k_head = p.heads + kv_head, v_head = p.heads + p.kv_heads + kv_head;
      tma::ArriveExpectBytes(bar.kv_full(), 2 * kKVBytes);
      for (int panel = 0; panel < 2; ++panel) {
        tma::Load4d(s_k + panel * kKVBytes / 2, &kv_map, 64 * panel, k_head, int(k0), b,
                    bar.kv_full());
        tma::Load4d(s_v + panel * kKVBytes / 2, &kv_map, 64 * panel, v_head, int(k0), b,
                    bar.kv_full());
      }
      constexpr uint32_t kTileTraffic =
          2 * kTileBytes + (kDocuments ? 3 : 2) * kStatsBytes;
      for (int it = 0; it < iterations; ++it) {
        const int s = QueryRing::Stage(it);
        tma::Wait(bar.empty(s), QueryRing::FreeParity(it));
        const int h = head_of(it), q0 = tile_of(it) * kQTile;
        tma::ArriveExpectBytes(bar.full(s), kTileTraffic);
        for (int panel = 0; panel < 2; ++panel) {
          tma::Load4d(q_tile(s) + panel * kTileBytes / 2, &q_map, 64 * panel, h, q0, b,
                      bar.full(s));
          tma::Load4d(do_tile(s) + panel * kTileBytes / 2, &dout_map, 64 * panel, h, q0, b,
                      bar.full(s));
        }
        const int64_t row = (int64_t(b) * p.heads + h) * seq_pad + q0;
        tma::LoadBytes(SmemAddress(stats(s, 0)), lse2 + row, kStatsBytes, bar.full(s));
        tma::LoadBytes(SmemAddress(stats(s, 1)), delta + row, kStatsBytes, bar.full(s));
        if (kDocuments) {
          tma::LoadBytes(SmemAddress(stats(s, 2)), first_keys + int64_t(b) * seq_pad + q0,
                         kStatsBytes, bar.full(s));
        }
      }
    }
    return;
  }

  // ---- consumers: two warpgroups of 64 keys each ----
  tma::GrowRegisters<kConsumerRegisters>();
  const int wg = warpgroup - 1;
  const int consumer_thread = threadIdx.x - wgmma::kWarpgroupThreads;
  const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wg_key0 = 64 * wg;  // the warpgroup's first key in the block
  const int64_t key_lo = k0 + wg_key0 + 16 * warp + g;  // this lane's keys: key_lo, key_lo + 8
  const float scale = p.scale_log2 / flash::kLog2e;

  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  // The turn this block passes on once every consumer's part of the last
  // tile's sum is written (after the next barrier); null if none.
  int32_t* pass_turn = nullptr;
  tma::Wait(bar.kv_full(), 0);
  for (int it = 0; it < iterations; ++it) {
    const int s = QueryRing::Stage(it);
    tma::Wait(bar.full(s), QueryRing::FullParity(it));
    const int m = tile_of(it), h = head_of(it);
    const int64_t q0 = int64_t(m) * kQTile;
    const bool diagonal = q0 < k0 + wg_key0 + 63;
    const float* tile_lse = reinterpret_cast<const float*>(stats(s, 0));
    const float* tile_delta = reinterpret_cast<const float*>(stats(s, 1));
    const int32_t* tile_first_key = reinterpret_cast<const int32_t*>(stats(s, 2));
    const bool doc_edge = kDocuments && tile_first_key[kQTile - 1] > k0 + wg_key0;

    // P^T and dS^T for the warpgroup's 64 keys: zero where the query precedes
    // the key or its document starts after the key.
    uint32_t pa[kQTile / 16][4], dsa[kQTile / 16][4];
    flash::KeyRowsFragments<kD, kKeyBlock, kQTile>(s_k, s_v, wg_key0, q_tile(s), do_tile(s),
                                                   key_lo, q0, diagonal, doc_edge, tile_lse,
                                                   tile_delta, tile_first_key, p.scale_log2, t,
                                                   pa, dsa);
    // dS^T into shared memory (rows: the block's keys; 128-byte swizzle),
    // where the dQ product reads it transposed. Two buffers: a warpgroup
    // writes buffer (it & 1) only after both passed the barrier of it - 1,
    // so the other has finished reading it at it - 2.
    unsigned char* ds_ptr = smem + kDsOffset + (it & 1) * kDsBytes;
    const uint32_t s_ds = SmemAddress(ds_ptr);
    {
      const int row = wg_key0 + 16 * warp + g;
#pragma unroll
      for (int kt = 0; kt < kQTile / 16; ++kt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // columns 16 kt + 8 half + 2 t
          const int chunk = 2 * kt + half;
          *reinterpret_cast<uint32_t*>(ds_ptr + wgmma::ChunkOffset<kKeyBlock>(row, chunk) +
                                       4 * t) = dsa[kt][2 * half];
          *reinterpret_cast<uint32_t*>(ds_ptr + wgmma::ChunkOffset<kKeyBlock>(row + 8, chunk) +
                                       4 * t) = dsa[kt][2 * half + 1];
        }
      }
    }
    // dV += P^T dO and dK += dS^T Q: the tiles' rows are the contraction.
    wgmma::Fence();
    wgmma::MmaFragmentsTimesTile<kD, kQTile>(dv, pa, do_tile(s));
    wgmma::MmaFragmentsTimesTile<kD, kQTile>(dk, dsa, q_tile(s));
    wgmma::Commit();
    wgmma::ProxyFence();
    // Both warpgroups' dS^T written; every consumer's part of the previous
    // tile's sum is written too, so its turn passes now.
    tma::SyncNamed(kConsumersBarrier, kConsumerThreads);
    if (pass_turn != nullptr) {
      if (consumer_thread == 0) StoreRelease(pass_turn, n + 1);
      pass_turn = nullptr;
    }

    // This block's part of dQ for the tile, columns [64 wg, 64 wg + 64):
    // dS (queries x the block's keys, read transposed) times K's columns.
    float dq[8][4] = {};
    wgmma::Fence();
#pragma unroll
    for (int kt = 0; kt < kKeyBlock / 16; ++kt) {
      wgmma::MmaSS64<1, 1>(dq, wgmma::MNMajor<kKeyBlock>(s_ds, 16 * kt, 0),
                           wgmma::MNMajor<kKeyBlock>(s_k, 16 * kt, 64 * wg), 1);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceOperands(dv);
    wgmma::FenceOperands(dk);
    wgmma::FenceOperands(dq);
    wgmma::FenceOperands(pa);
    wgmma::FenceOperands(dsa);
    if (lane == 0) tma::Arrive(bar.empty(s));  // Q, dO and the stats are read

    // Add it to the tile's sum in key-block order.
    const int64_t last_row = min(q0 + kQTile, p.seq) - 1;
    const int last_block = static_cast<int>(last_row / kKeyBlock);
    const int first_block = kDocuments ? first_blocks[m] : 0;
    int32_t* turn = dq_turns + (int64_t(b) * p.heads + h) * tiles + m;
    if (n != first_block) {
      if (consumer_thread == 0) {
        while (LoadAcquire(turn) != n) {
        }
      }
      tma::SyncNamed(kTurnBarrier, kConsumerThreads);
    }
    // Lanes 2i and 2i + 1 swap halves, so that each holds four adjacent
    // columns of one row: the even lane row g, the odd lane row g + 8.
    const bool odd = t & 1;
    const int64_t row = q0 + 16 * warp + g + (odd ? 8 : 0);
    const int col = 64 * wg + 2 * (t & ~1);
    float4 part[8];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float give0 = odd ? dq[nt][0] : dq[nt][2], give1 = odd ? dq[nt][1] : dq[nt][3];
      const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1);
      const float got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
      part[nt] = odd ? make_float4(got0, got1, dq[nt][2], dq[nt][3])
                     : make_float4(dq[nt][0], dq[nt][1], got0, got1);
    }
    float* sum = dq_sums + ((int64_t(b) * p.heads + h) * seq_pad + row) * kD + col;
    if (n == last_block) {
      if (row < p.seq) {
        __nv_bfloat16* out = dqkv + (int64_t(b) * p.seq + row) * ts + int64_t(h) * kD + col;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          float4 v = part[nt];
          if (n != first_block) {
            const float4 before = __ldcg(reinterpret_cast<const float4*>(sum + 8 * nt));
            v = make_float4(before.x + v.x, before.y + v.y, before.z + v.z, before.w + v.w);
          }
          *reinterpret_cast<uint2*>(out + 8 * nt) =
              make_uint2(flash::PackBf16(v.x * scale, v.y * scale),
                         flash::PackBf16(v.z * scale, v.w * scale));
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (n == first_block) {
          __stcg(reinterpret_cast<float4*>(sum + 8 * nt), part[nt]);
        } else {
          AddFour(sum + 8 * nt, part[nt]);
        }
      }
      // The turn passes after the next barrier, which orders every
      // consumer's part of the sum before the release.
      pass_turn = turn;
    }
  }
  // K and V are no longer read (every dQ product has finished): they stage
  // the gradients.
  tma::SyncNamed(kConsumersBarrier, kConsumerThreads);
  if (pass_turn != nullptr && consumer_thread == 0) StoreRelease(pass_turn, n + 1);

  flash::StoreKeyGradients<kD>(p, b, kv_head, k0 + wg_key0 + 16 * warp, dk, dv, smem + kKOffset,
                               smem + kVOffset, wg_key0 + 16 * warp, dqkv, lane);
#else
  __trap();
#endif
}

}  // namespace

int64_t OrderedAttentionScratchFloats(int64_t batch, int heads, int64_t seq_pad) {
  const int64_t tiles = seq_pad / kQTile;
  // dQ sums, turn counters, first blocks (int32s counted as floats).
  return batch * heads * seq_pad * kD + batch * heads * tiles + batch * tiles;
}

absl::Status LaunchOrderedAttentionGradients(const flash::AttentionParams& p, int64_t batch,
                                             const __nv_bfloat16* dout, const float* delta,
                                             const float* lse2, const int32_t* first_keys,
                                             int64_t seq_pad, float* scratch,
                                             __nv_bfloat16* dqkv, cudaStream_t stream) {
  const int64_t tiles = seq_pad / kQTile;
  float* dq_sums = scratch;
  int32_t* dq_turns = reinterpret_cast<int32_t*>(scratch + batch * p.heads * seq_pad * kD);
  int32_t* tile_first_block = dq_turns + batch * p.heads * tiles;
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      dq_turns, 0, static_cast<size_t>(batch * p.heads * tiles) * sizeof(int32_t), stream));
  const bool documents = p.doc_starts != nullptr;
  if (documents) {
    constexpr int kFirstBlockThreads = 256;
    TileFirstBlocksKernel<<<static_cast<unsigned>(batch), kFirstBlockThreads,
                            static_cast<size_t>(tiles) * sizeof(int32_t), stream>>>(
        first_keys, seq_pad, static_cast<int>(tiles), tile_first_block);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  for (const void* ptr : {static_cast<const void*>(delta), static_cast<const void*>(lse2),
                          static_cast<const void*>(first_keys)}) {
    if ((reinterpret_cast<uintptr_t>(ptr) & 15) != 0) {
      return absl::InternalError("attention: backward scratch is not 16-byte aligned");
    }
  }
  const int qkv_heads = p.heads + 2 * p.kv_heads;
  const absl::StatusOr<CUtensorMap> kv_map =
      HeadRowsTensorMap(p.qkv, batch, p.seq, qkv_heads, kKeyBlock);
  if (!kv_map.ok()) return kv_map.status();
  const absl::StatusOr<CUtensorMap> q_map =
      HeadRowsTensorMap(p.qkv, batch, p.seq, qkv_heads, kQTile);
  if (!q_map.ok()) return q_map.status();
  const absl::StatusOr<CUtensorMap> dout_map =
      HeadRowsTensorMap(dout, batch, p.seq, p.heads, kQTile);
  if (!dout_map.ok()) return dout_map.status();
  static std::atomic<uint64_t> smem_allowed[2] = {0, 0};
  const dim3 grid(static_cast<unsigned>((p.seq + kKeyBlock - 1) / kKeyBlock * p.kv_heads),
                  static_cast<unsigned>(batch));
  if (documents) {
    CUDA_RETURN_IF_ERROR(AllowDynamicSmem(AttentionBackwardOrderedKernel<true>, kSmemBytes,
                                          smem_allowed[1]));
    AttentionBackwardOrderedKernel<true><<<grid, kThreads, kSmemBytes, stream>>>(
        *kv_map, *q_map, *dout_map, p, delta, lse2, first_keys, tile_first_block, seq_pad,
        dq_sums, dq_turns, dqkv);
  } else {
    CUDA_RETURN_IF_ERROR(AllowDynamicSmem(AttentionBackwardOrderedKernel<false>, kSmemBytes,
                                          smem_allowed[0]));
    AttentionBackwardOrderedKernel<false><<<grid, kThreads, kSmemBytes, stream>>>(
        *kv_map, *q_map, *dout_map, p, delta, lse2, first_keys, tile_first_block, seq_pad,
        dq_sums, dq_turns, dqkv);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

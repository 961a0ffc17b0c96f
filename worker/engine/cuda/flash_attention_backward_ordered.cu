// Causal attention backward at head dims 64 and 128 in one pass: each
// thread block owns 128 keys of one K/V head, computes their dK and dV, and
// adds its part of every query tile's dQ into an fp32 sum in a fixed order,
// so the result is bit-identical run to run without recomputing S and dP
// for dQ (the two-pass form in flash_attention_backward.cu recomputes them:
// seven products per tile instead of five).
//
// Warps. A block is three warpgroups. The first is the producer: one thread
// copies K and V once and then each query tile (Q, dO, lse2, D and, with
// documents, the queries' document starts) into a ring of two stages with
// TMA (attention_tensor_maps.h, tma.cuh); another, the dQ writer, sends the
// block's dQ parts (below). The warpgroup gives most of its registers to
// the other two, the consumers, which only compute. A consumer hands a
// stage back as soon as its products have read it; the consumers meet at
// one named barrier per tile (both halves of dS^T written), not at
// block-wide ones, and never wait for another block.
//
// The two consumer warpgroups each hold 64 of the block's keys. For each
// query tile (64 queries; the tiles from the last one down to the block's
// diagonal) and each query head of the group, a warpgroup computes
// S^T = K Q^T and dP^T = V dO^T for its keys, P^T from the saved lse and
// dS^T = P^T (dP^T - D), then dV += P^T dO and dK += dS^T Q from registers,
// as the two-pass dK/dV kernel does. Both warpgroups also leave dS^T in
// shared memory, and each then multiplies the whole 64 x 128 dS by its half
// of K's columns (64 x 64 products at head dim 128, 64 x 32 at 64): the
// block's part of the tile's dQ, 64 x head dim in fp32,
// which the consumers stage in shared memory (two buffers) for the writer.
//
// Order. The blocks that see query tile m are the key blocks n from
// tile_first_block[m] (0 without documents) to the one holding the tile's
// last query. Block n's writer waits until the tile's turn counter reads n,
// adds the staged part to the tile's fp32 sum with one bulk reduction (the
// first block stores it), waits for the addition to complete, and hands the
// turn to n + 1. Every element is so summed in key-block order, on every
// run. A writer only ever waits for the block before it in the grid, which
// the GPU starts first, so the wait always ends; its consumers run up to
// two tiles ahead of it. The atomic form (kOrdered false, FlashBackwardForm::kAtomicDq)
// keeps only the first block's store first: the others add their parts as
// soon as it is in, in whatever order they come, so the sums' rounding
// varies run to run and no writer waits for any but the first. Blocks walk
// their tiles from the last one down, the heads of a group innermost, so
// that neighbouring blocks reach each tile at nearly the same time.
//
// Grid order. Block n of each K/V head starts before block n + 1 of any
// (the long blocks first, so they do not end the grid), within groups of
// K/V heads taken one group after another. The blocks of one K/V head read
// the same query tiles and add to the same dQ sums, near the same time, so
// the more of them run at once, the fewer of those bytes come from memory
// twice. A group holds as many K/V heads as have about twice as many key
// blocks as there are SMs (at least one head). On an H200 (132 SMs) at
// (1, 32, 8, 16384, 128), 128 key blocks a head, that is two heads a
// group, which took the forward + backward from 15.24-15.39 ms to
// 14.96-15.12; one head a group was slower there, and smaller groups than
// the rule's were slower at 2048 tokens (bench/RESULTS.md). With documents
// every K/V head is in one group: grouping them was not measured.
//
// Documents: a tile's first block comes from the document start of its
// first query. tile_first_block is the suffix minimum of those (the tiny
// kernel below), which is the value itself for documents that never start
// earlier than an earlier one does, and keeps both a block's tiles and a
// tile's blocks contiguous for starts of any content, so no block waits for
// a block that never comes. Inside a tile, keys before a query's own
// document start get P = 0 as in the two-pass kernels.
//
// dQ as bf16. A small kernel scales each tile's sum into dQ. In the
// ordered form a tile's sum is complete once its last block (the one
// holding the tile's last query) has added its part, so that block's writer
// then appends the tile to a completion queue. The conversion kernel is
// launched as a programmatic dependent of the gradients kernel: it may
// start once every gradients block has started, and so runs on the SMs
// that the grid's end leaves idle, block i converting the i-th tile to
// complete (waiting for it if need be) while its sum is still in the L2.
// Only its last block waits for the whole gradients kernel
// (griddepcontrol.wait), so that nothing after it in the stream starts
// before dK and dV are written. Every grid's end leaves SMs idle, short
// documents' most, since their blocks differ most in length: 8 documents
// of 1024 tokens kept the SMs 83% busy (bench/RESULTS.md); with the
// conversion run in that idle time, their forward + backward took
// 0.649-0.658 ms against 0.695-0.700. The atomic form cannot tell when a
// tile's last part is in without waiting for each addition to complete,
// not only to be read, and converts after the gradients kernel: counting
// the parts made its documents 2.6% faster but each whole-sequence shape
// 1-5% slower (one run each).
//
// Scratch (after the two-pass kernels' D, lse2 and document starts): the dQ
// sums [B, heads, S padded to 128, head dim] fp32 (each 64-row tile in the
// consumers' fragment order); the turn counters, the completion queue and
// its length (all zeroed by the launcher before each call); the tiles'
// first blocks.

#include <cuda_bf16.h>

#include <algorithm>

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

constexpr int kConsumers = 2;  // warpgroups of 64 keys
constexpr int kThreads = (1 + kConsumers) * wgmma::kWarpgroupThreads;  // + the producer
constexpr int kConsumerThreads = kConsumers * wgmma::kWarpgroupThreads;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kKeyBlock = 64 * kConsumers;
constexpr int kQTile = 64;
// Registers per thread after the hand-over (24 x 128 + 240 x 256 fits; the
// dQ writer spills a few bytes at 24).
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(tma::HandOverFits(kProducerRegisters, 2, kConsumerRegisters),
              "the consumers would wait forever for registers");
// Named barrier over the consumers: both dS^T written (and, at the end,
// every product finished).
constexpr int kConsumersBarrier = 1;
// The producer warpgroup's threads: one issues the copies, one (in another
// warp) writes the dQ parts.
constexpr int kCopyThread = 0;
constexpr int kDqWriterThread = 32;

// The completion queue's length, padded so that the tiles' first blocks
// after it stay 16-byte aligned.
constexpr int kQueueCountInts = 4;

constexpr int kDsBytes = kKeyBlock * kQTile * 2;
constexpr int kStatsBytes = kQTile * 4;
// Shared memory from the 1024-byte aligned base: K, V, Q[stages],
// dO[stages], dS^T[2], dQ parts[2], per stage lse2, D and document starts,
// barriers. Tiles hold kD / 64 panels of 64 columns (wgmma.cuh).
template <int kD>
struct Layout {
  static constexpr int kPanels = kD / 64;
  static constexpr int kStages = kD == 64 ? 4 : 2;  // query tiles in flight
  static constexpr int kKVBytes = kKeyBlock * kD * 2;
  static constexpr int kTileBytes = kQTile * kD * 2;
  static constexpr int kDqBytes = kQTile * kD * 4;  // a tile's dQ part, fp32
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKVBytes;
  static constexpr int kQOffset = kVOffset + kKVBytes;
  static constexpr int kDoutOffset = kQOffset + kStages * kTileBytes;
  static constexpr int kDsOffset = kDoutOffset + kStages * kTileBytes;
  static constexpr int kDqOffset = kDsOffset + 2 * kDsBytes;
  static constexpr int kStatsOffset = kDqOffset + 2 * kDqBytes;
  static constexpr int kBarrierOffset = kStatsOffset + 3 * kStages * kStatsBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 8 * (1 + 2 * kStages + 4) + 1024;
  // Each consumer's share of a tile's dQ: kD / 2 columns, kD / 16 column
  // groups of 8 in its accumulator.
  static constexpr int kDqGroups = kD / 16;
};

template <int kStages>
struct Barriers {
  uint32_t base;
  __device__ uint32_t kv_full() const { return base; }
  __device__ uint32_t full(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t empty(int s) const { return base + 8 * (1 + kStages + s); }
  // dQ part buffer d written by the consumers / sent by the writer.
  __device__ uint32_t dq_full(int d) const { return base + 8 * (1 + 2 * kStages + d); }
  __device__ uint32_t dq_empty(int d) const { return base + 8 * (3 + 2 * kStages + d); }
};

// The block's part of a tile's dQ for one consumer: dS (queries x the
// block's keys, read transposed from s_ds) times K's columns [kD / 2 wg,
// kD / 2 (wg + 1)).
template <int kD>
__device__ __forceinline__ void IssueDqPart(float (&dq)[kD / 16][4], uint32_t s_ds, uint32_t s_k,
                                            int wg) {
#pragma unroll
  for (int kt = 0; kt < kKeyBlock / 16; ++kt) {
    if constexpr (kD == 128) {
      wgmma::MmaSS64<1, 1>(dq, wgmma::MNMajor<kKeyBlock>(s_ds, 16 * kt, 0),
                           wgmma::MNMajor<kKeyBlock>(s_k, 16 * kt, 64 * wg), kt > 0);
    } else {
      wgmma::MmaSS32<1, 1>(dq, wgmma::MNMajor<kKeyBlock>(s_ds, 16 * kt, 0),
                           wgmma::MNMajor<kKeyBlock>(s_k, 16 * kt, 32 * wg), kt > 0);
    }
  }
}

#ifdef TESSERA_WGMMA
__device__ __forceinline__ int LoadAcquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(int32_t* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
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

// dQ = the sums times the softmax scale, as bf16 into dqkv's query heads.
// One block per 64-query tile of one head: the tile's sum, held in the
// consumers' fragment order (see their staging), is put back into rows in
// shared memory, and each row goes out as 16-byte stores. kFromQueue (the
// ordered form): block i takes the i-th tile of the completion queue
// (entry: 1 + (b heads + h) tiles + m), waiting until it is written;
// otherwise block (m, b heads + h) takes tile m of that head.
template <int kD, bool kFromQueue>
__global__ void DqFromSumsKernel(AttentionParams p, int64_t seq_pad, int tiles,
                                 const int32_t* completed, const float* dq_sums,
                                 __nv_bfloat16* dqkv) {
#ifdef TESSERA_WGMMA
  constexpr int kGroups = Layout<kD>::kDqGroups;
  __shared__ float s_rows[kQTile][kD + 4];
  int64_t q0, bh;
  if constexpr (kFromQueue) {
    __shared__ int32_t s_entry;
    if (threadIdx.x == 0) {
      int32_t entry;
      while ((entry = LoadAcquire(completed + blockIdx.x)) == 0) {
      }
      s_entry = entry - 1;
    }
    __syncthreads();
    q0 = int64_t(s_entry % tiles) * kQTile;
    bh = s_entry / tiles;
  } else {
    q0 = int64_t(blockIdx.x) * kQTile;
    bh = blockIdx.y;
  }
  const int64_t b = bh / p.heads, h = bh % p.heads;
  // L2 loads: the sums were written by another SM's bulk reductions.
  const float4* src = reinterpret_cast<const float4*>(dq_sums + (bh * seq_pad + q0) * kD);
  for (int f = threadIdx.x; f < kQTile * kD / 4; f += blockDim.x) {
    const float4 v = __ldcg(src + f);
    const int wg = f / (128 * kGroups), nt = (f / 128) % kGroups, thread = f % 128;
    const int row = 16 * (thread / 32) + (thread % 32) / 4;
    const int col = (kD / 2) * wg + 8 * nt + 2 * (thread % 4);
    s_rows[row][col] = v.x;
    s_rows[row][col + 1] = v.y;
    s_rows[row + 8][col] = v.z;
    s_rows[row + 8][col + 1] = v.w;
  }
  __syncthreads();
  const float scale = p.scale_log2 / flash::kLog2e;
  for (int c = threadIdx.x; c < kQTile * kD / 8; c += blockDim.x) {
    const int row = c / (kD / 8), col = (c % (kD / 8)) * 8;
    const int64_t s = q0 + row;
    if (s >= p.seq) break;  // the rows past the end are the last ones
    const float* v = &s_rows[row][col];
    *reinterpret_cast<uint4*>(dqkv + (b * p.seq + s) * p.qkv_token_stride + h * kD + col) =
        make_uint4(flash::PackBf16(v[0] * scale, v[1] * scale),
                   flash::PackBf16(v[2] * scale, v[3] * scale),
                   flash::PackBf16(v[4] * scale, v[5] * scale),
                   flash::PackBf16(v[6] * scale, v[7] * scale));
  }
  // The last block holds the kernel open until the gradients kernel has
  // finished (dK and dV included): see the file comment.
  if (kFromQueue && blockIdx.x == gridDim.x - 1) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
  }
#else
  __trap();
#endif
}

template <int kD, bool kDocuments, bool kOrdered>
__global__ void __launch_bounds__(kThreads, 1)
    AttentionBackwardOrderedKernel(const __grid_constant__ CUtensorMap kv_map,
                                   const __grid_constant__ CUtensorMap q_map,
                                   const __grid_constant__ CUtensorMap dout_map,
                                   AttentionParams p, const float* delta, const float* lse2,
                                   const int32_t* first_keys, const int32_t* tile_first_block,
                                   int64_t seq_pad, float* dq_sums, int32_t* dq_turns,
                                   int32_t* completed, int32_t* completed_count,
                                   __nv_bfloat16* dqkv, int kv_group) {
#ifdef TESSERA_WGMMA
  using L = Layout<kD>;
  constexpr int kStages = L::kStages, kTileBytes = L::kTileBytes, kKVBytes = L::kKVBytes;
  constexpr int kDqBytes = L::kDqBytes;
  using QueryRing = tma::Ring<kStages>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::AlignedSmem(smem_raw);
  const uint32_t base = SmemAddress(smem);
  const uint32_t s_k = base + L::kKOffset, s_v = base + L::kVOffset;
  const Barriers<kStages> bar{base + L::kBarrierOffset};
  auto q_tile = [&](int s) { return base + L::kQOffset + s * kTileBytes; };
  auto do_tile = [&](int s) { return base + L::kDoutOffset + s * kTileBytes; };
  // Per stage: lse2, D and (documents) the queries' document starts.
  auto stats = [&](int s, int which) {
    return smem + L::kStatsOffset + (3 * s + which) * kStatsBytes;
  };

  // Longest blocks first within each group of kv_group K/V heads (the file
  // comment): block n of every head of the group before block n + 1 of any.
  const int key_blocks = static_cast<int>(gridDim.x) / p.kv_heads;
  const int group = static_cast<int>(blockIdx.x) / (kv_group * key_blocks);
  const int in_group = static_cast<int>(blockIdx.x) - group * kv_group * key_blocks;
  const int group_heads = min(kv_group, p.kv_heads - group * kv_group);
  const int kv_head = group * kv_group + in_group % group_heads, n = in_group / group_heads;
  const int b = blockIdx.y;
  const int group_size = p.heads / p.kv_heads;
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
    for (int d = 0; d < 2; ++d) {
      tma::InitBarrier(bar.dq_full(d), kConsumerWarps);
      tma::InitBarrier(bar.dq_empty(d), 1);
    }
    tma::FenceBarrierInit();
  }
  __syncthreads();
  // The conversion kernel may start once every block of this grid has got
  // here (the file comment).
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  const int warpgroup = threadIdx.x / wgmma::kWarpgroupThreads;
  if (warpgroup == 0) {
    // ---- producer: K and V once, then each query tile into the ring ----
    tma::ShrinkRegisters<kProducerRegisters>();
    if (threadIdx.x == kDqWriterThread) {
      // The dQ writer: sends each tile's part once the consumers have
      // staged it, in key-block order (see the file comment).
      for (int it = 0; it < iterations; ++it) {
        const int d = it & 1, m = tile_of(it), h = head_of(it);
        tma::Wait(bar.dq_full(d), (it >> 1) & 1);
        const int first_block = kDocuments ? first_blocks[m] : 0;
        int32_t* turn = dq_turns + (int64_t(b) * p.heads + h) * tiles + m;
        float* sum = dq_sums + ((int64_t(b) * p.heads + h) * seq_pad + int64_t(m) * kQTile) * kD;
        const uint32_t part = base + L::kDqOffset + d * kDqBytes;
        if (n == first_block) {
          tma::StoreBytes(sum, part, kDqBytes);
          tma::CommitAndDrainStores();
          tma::ProxyFenceGlobal();
          StoreRelease(turn, n + 1);
        } else if (kOrdered) {
          while (LoadAcquire(turn) != n) {
          }
          tma::ProxyFenceGlobal();
          tma::AddFloats(sum, part, kDqBytes);
          tma::CommitAndDrainStores();
          tma::ProxyFenceGlobal();
          StoreRelease(turn, n + 1);
        } else {
          // Any order once the first block's store is in; the part's
          // buffer is free again as soon as the reduction has read it.
          while (LoadAcquire(turn) == 0) {
          }
          tma::ProxyFenceGlobal();
          tma::AddFloats(sum, part, kDqBytes);
          tma::CommitAndDrainStoreReads();
        }
        if (kOrdered && n == m / 2) {
          // The tile's last block: its sum is complete and, after the
          // release above, visible to whoever reads the queue's entry.
          const int slot = atomicAdd(completed_count, 1);
          StoreRelease(completed + slot, 1 + (b * p.heads + h) * tiles + m);
        }
        tma::Arrive(bar.dq_empty(d));
      }
      tma::CommitAndDrainStores();
    }
    if (threadIdx.x == kCopyThread) {
      tma::PrefetchMap(&kv_map);
      tma::PrefetchMap(&q_map);
      tma::PrefetchMap(&dout_map);
      const int k_head = p.heads + kv_head, v_head = p.heads + p.kv_heads + kv_head;
      tma::ArriveExpectBytes(bar.kv_full(), 2 * kKVBytes);
      for (int panel = 0; panel < L::kPanels; ++panel) {
        tma::Load4d(s_k + panel * kKVBytes / L::kPanels, &kv_map, 64 * panel, k_head, int(k0), b,
                    bar.kv_full());
        tma::Load4d(s_v + panel * kKVBytes / L::kPanels, &kv_map, 64 * panel, v_head, int(k0), b,
                    bar.kv_full());
      }
      constexpr uint32_t kTileTraffic =
          2 * kTileBytes + (kDocuments ? 3 : 2) * kStatsBytes;
      for (int it = 0; it < iterations; ++it) {
        const int s = QueryRing::Stage(it);
        tma::Wait(bar.empty(s), QueryRing::FreeParity(it));
        const int h = head_of(it), q0 = tile_of(it) * kQTile;
        tma::ArriveExpectBytes(bar.full(s), kTileTraffic);
        for (int panel = 0; panel < L::kPanels; ++panel) {
          tma::Load4d(q_tile(s) + panel * kTileBytes / L::kPanels, &q_map, 64 * panel, h, q0, b,
                      bar.full(s));
          tma::Load4d(do_tile(s) + panel * kTileBytes / L::kPanels, &dout_map, 64 * panel, h, q0,
                      b, bar.full(s));
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
  const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wg_key0 = 64 * wg;  // the warpgroup's first key in the block
  const int64_t key_lo = k0 + wg_key0 + 16 * warp + g;  // this lane's keys: key_lo, key_lo + 8

  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
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
    unsigned char* ds_ptr = smem + L::kDsOffset + (it & 1) * kDsBytes;
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
    tma::SyncNamed(kConsumersBarrier, kConsumerThreads);  // both halves of dS^T written

    // This block's part of dQ for the tile, columns [kD / 2 wg, kD / 2 (wg + 1)).
    float dq[L::kDqGroups][4];
    wgmma::Fence();
    IssueDqPart<kD>(dq, s_ds, s_k, wg);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceOperands(dv);
    wgmma::FenceOperands(dk);
    wgmma::FenceOperands(dq);
    wgmma::FenceOperands(pa);
    wgmma::FenceOperands(dsa);
    if (lane == 0) tma::Arrive(bar.empty(s));  // Q, dO and the stats are read

    // Stage the part for the writer in fragment order: the accumulator's
    // four floats of column group nt as one float4 at (128 (kDqGroups wg +
    // nt) + the warpgroup's thread) float4s, so a warp stores 512
    // contiguous bytes and no bank is hit twice. dq_sums keeps this order;
    // DqFromSumsKernel puts it back into rows.
    const int d = it & 1;
    tma::Wait(bar.dq_empty(d), ((it >> 1) & 1) ^ 1);
    float4* part = reinterpret_cast<float4*>(smem + L::kDqOffset + d * kDqBytes) +
                   128 * L::kDqGroups * wg + 32 * warp + lane;
#pragma unroll
    for (int nt = 0; nt < L::kDqGroups; ++nt) {
      part[128 * nt] = make_float4(dq[nt][0], dq[nt][1], dq[nt][2], dq[nt][3]);
    }
    wgmma::ProxyFence();  // the writer's bulk copy reads it
    __syncwarp();
    if (lane == 0) tma::Arrive(bar.dq_full(d));
  }
  // K and V are no longer read (every dQ product has finished): they stage
  // the gradients.
  tma::SyncNamed(kConsumersBarrier, kConsumerThreads);

  flash::StoreKeyGradients<kD>(p, b, kv_head, k0 + wg_key0 + 16 * warp, dk, dv,
                               smem + L::kKOffset, smem + L::kVOffset, wg_key0 + 16 * warp, dqkv,
                               lane);
#else
  __trap();
#endif
}


// K/V heads per group of the grid (the file comment): as many as have
// about twice as many key blocks as there are SMs (at least one head); all
// of them with documents.
int KvHeadsPerGroup(int kv_heads, int64_t key_blocks, int sm_count, bool documents) {
  if (documents || sm_count <= 0) return kv_heads;
  const int64_t heads = 2 * int64_t(sm_count) / key_blocks;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(heads, 1), kv_heads));
}

template <int kD>
absl::Status LaunchKernels(const flash::AttentionParams& p, int64_t batch,
                           const __nv_bfloat16* dout, const float* delta, const float* lse2,
                           const int32_t* first_keys, int64_t seq_pad, bool ordered,
                           int sm_count, float* scratch, __nv_bfloat16* dqkv,
                           cudaStream_t stream) {
  constexpr int kSmemBytes = Layout<kD>::kSmemBytes;
  const int64_t tiles = seq_pad / kQTile;
  const int64_t head_tiles = batch * p.heads * tiles;
  float* dq_sums = scratch;
  // Turn counters, the completion queue and its length (zeroed together),
  // then the tiles' first blocks.
  int32_t* dq_turns = reinterpret_cast<int32_t*>(scratch + batch * p.heads * seq_pad * kD);
  int32_t* completed = dq_turns + head_tiles;
  int32_t* completed_count = completed + head_tiles;
  int32_t* tile_first_block = completed_count + kQueueCountInts;
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      dq_turns, 0, static_cast<size_t>(2 * head_tiles + kQueueCountInts) * sizeof(int32_t),
      stream));
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
      HeadRowsTensorMap(p.qkv, batch, p.seq, qkv_heads, kD, kKeyBlock);
  if (!kv_map.ok()) return kv_map.status();
  const absl::StatusOr<CUtensorMap> q_map =
      HeadRowsTensorMap(p.qkv, batch, p.seq, qkv_heads, kD, kQTile);
  if (!q_map.ok()) return q_map.status();
  const absl::StatusOr<CUtensorMap> dout_map =
      HeadRowsTensorMap(dout, batch, p.seq, p.heads, kD, kQTile);
  if (!dout_map.ok()) return dout_map.status();
  const int64_t key_blocks = (p.seq + kKeyBlock - 1) / kKeyBlock;
  const dim3 grid(static_cast<unsigned>(key_blocks * p.kv_heads), static_cast<unsigned>(batch));
  const int kv_group = KvHeadsPerGroup(p.kv_heads, key_blocks, sm_count, documents);
  auto launch = [&](auto kernel, std::atomic<uint64_t>& smem_allowed) -> absl::Status {
    CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, kSmemBytes, smem_allowed));
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(*kv_map, *q_map, *dout_map, p, delta, lse2,
                                                   first_keys, tile_first_block, seq_pad,
                                                   dq_sums, dq_turns, completed, completed_count,
                                                   dqkv, kv_group);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    return absl::OkStatus();
  };
  static std::atomic<uint64_t> smem_allowed[4] = {0, 0, 0, 0};
  const absl::Status launched =
      documents
          ? (ordered ? launch(AttentionBackwardOrderedKernel<kD, true, true>, smem_allowed[0])
                     : launch(AttentionBackwardOrderedKernel<kD, true, false>, smem_allowed[1]))
          : (ordered ? launch(AttentionBackwardOrderedKernel<kD, false, true>, smem_allowed[2])
                     : launch(AttentionBackwardOrderedKernel<kD, false, false>, smem_allowed[3]));
  if (!launched.ok()) return launched;
  constexpr int kConvertThreads = 256;
  const int64_t real_tiles = (p.seq + kQTile - 1) / kQTile;
  if (!ordered) {
    DqFromSumsKernel<kD, false><<<dim3(static_cast<unsigned>(real_tiles),
                                       static_cast<unsigned>(batch * p.heads)),
                                  kConvertThreads, 0, stream>>>(
        p, seq_pad, static_cast<int>(tiles), completed, dq_sums, dqkv);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    return absl::OkStatus();
  }
  // Every tile joins the queue once: one block per entry, started as the
  // gradients kernel's programmatic dependent (the file comment).
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(batch * p.heads * real_tiles));
  config.blockDim = dim3(kConvertThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = overlap;
  config.numAttrs = 1;
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, DqFromSumsKernel<kD, true>, p, seq_pad,
                                          static_cast<int>(tiles),
                                          static_cast<const int32_t*>(completed),
                                          static_cast<const float*>(dq_sums), dqkv));
  return absl::OkStatus();
}

}  // namespace

int64_t OrderedAttentionScratchFloats(int64_t batch, int heads, int head_dim, int64_t seq_pad) {
  const int64_t tiles = seq_pad / kQTile;
  // dQ sums, turn counters, the completion queue and its length, first
  // blocks (int32s counted as floats).
  return batch * heads * seq_pad * head_dim + 2 * batch * heads * tiles + kQueueCountInts +
         batch * tiles;
}

absl::Status LaunchOrderedAttentionGradients(const flash::AttentionParams& p, int64_t batch,
                                             int head_dim, const __nv_bfloat16* dout,
                                             const float* delta, const float* lse2,
                                             const int32_t* first_keys, int64_t seq_pad,
                                             bool ordered, int sm_count, float* scratch,
                                             __nv_bfloat16* dqkv, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return LaunchKernels<64>(p, batch, dout, delta, lse2, first_keys, seq_pad, ordered,
                               sm_count, scratch, dqkv, stream);
    case 128:
      return LaunchKernels<128>(p, batch, dout, delta, lse2, first_keys, seq_pad, ordered,
                                sm_count, scratch, dqkv, stream);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention: the one-pass backward takes head dim 64 or 128, not ", head_dim));
  }
}

}  // namespace cuda
}  // namespace tessera

// Causal attention forward on Hopper, head dims 64 and 128, with
// specialised warps, the FlashAttention-3 structure: one warpgroup only
// copies, two only compute, and each computing warpgroup's softmax runs
// under tensor-core work, its own and the other's. Only the output and the
// per-query log-sum-exp leave the chip; no S x S tensor exists.
//
// Same quantities as the CPU reference (worker/engine/cpu/attention.h):
// s = q.k / sqrt(hd), out = softmax(s) v per query, causal, within the
// query's document where documents are given, and lse = logsumexp(s). It
// differs in fp32 summation order, in exp2 with the scale folded into the
// exponent's fused multiply-add, and in feeding P to the P V product as bf16
// (as every flash kernel does).
//
// Work split. An item is 128 consecutive queries of one head: it walks the
// key/value tiles (128 keys) from the first its queries' documents need up
// to the diagonal. One block stays on each SM and takes item after item
// (from a counter, below), so that the next item's Q and first K/V tiles
// are copied while the last item's final product and output store run: a
// short item (a short document's queries, a short sequence) no longer pays
// for a block's start and end.
//  * Warpgroup 0 is the producer: one thread issues TMA copies of each
//    item's Q and of each K and V tile into a ring of two stages, paced by
//    mbarriers (tma.cuh), and the warpgroup gives most of its registers
//    away. Q's buffer is copied again for the next item once both
//    consumers' last S product of this one has read it.
//  * Warpgroups 1 and 2 each own 64 of an item's queries, with 240
//    registers a thread: the 64 x head-dim output and 64 x 128 score
//    accumulators and the bf16 P fragments fit without spilling.
// In each step a consumer issues S = Q K^T of tile j and O += P V of tile
// j - 1 back to back, runs tile j's softmax while the second product is
// still on the tensor cores, then rescales O. The two consumers take turns
// to issue (ping-pong), so one's softmax also runs under the other's
// products. No block-wide barrier is taken inside the loop; a stage is
// handed back to the producer as soon as both consumers' products that
// read it have finished.
//
// Measured on an H200 (bench/RESULTS.md): at (1, 32, 8, 8192, 128) the
// 64-query, 64-key cp.async kernel that ran before took 2.049 ms; this
// structure 1.192 ms; with the softmax's scale in its FMA and masks only on
// edge tiles 0.955 ms; with ping-pong 0.925 ms (cuDNN 0.939 ms). At head dim
// 64 it replaced a one-warpgroup cp.async kernel: 0.315 -> 0.235 ms at
// (8, 16, 16, 2048, 64), 0.599 -> 0.370 ms at (1, 16, 16, 8192, 64). One
// block per item before the counter: 0.234 -> 0.220 ms at (8, 16, 16, 2048,
// 64), 0.931 -> 0.914 ms at (1, 32, 8, 8192, 128), 0.192 -> 0.178 ms on 8
// documents of 1024 there.
//
// Documents (packed sequences): an item starts at the tile holding its
// first query's document start, so tiles wholly before every one of its
// queries' documents are never loaded; in the tiles between its first and
// last query's document starts, keys before a row's document start are
// masked like future keys. A row can then see a tile with no key of its own,
// so its running maximum may still be -inf: the rescaling then subtracts 0
// instead, and the row's sum stays 0 until its own keys arrive.
//
// Copies. The map (attention_tensor_maps.h) copies boxes of 128 tokens x 64
// columns of one head of the packed qkv tensor in wgmma.cuh's tile layout,
// one box per 64-column panel. Tokens past the sequence's end arrive as
// zeros. Head dim 64 has half the bytes a tile, so its ring has four stages
// instead of two.
//
// Items are numbered heaviest first (the last query blocks of every head
// and sequence, then the ones before), in groups of K/V heads whose keys
// and values fit the L2 cache together (attention_item_order.h). Block c
// starts with item c; each then takes the next number from a counter (one
// int of device memory, zeroed on the stream before each launch) as it
// starts an item's copies, so the blocks' loads even out as a grid of one
// block per item would, in about the same order.
//
// Determinism: one block computes each item's outputs, walking its tiles in
// a fixed order; the bits are the same every run, whichever block it is.

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <limits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/attention_item_order.h"
#include "worker/engine/cuda/attention_tensor_maps.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/flash_attention_tiles.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/tma.cuh"
#include "worker/engine/cuda/wgmma.cuh"

namespace tessera {
namespace cuda {
namespace {

using flash::AttentionParams;

constexpr int kBlockQ = 128;   // queries per block, 64 per computing warpgroup
constexpr int kBlockKV = 128;  // keys per tile
constexpr int kThreads = 3 * wgmma::kWarpgroupThreads;
constexpr int kConsumerWarps = 8;
// Named barriers 1 and 2: consumer c may issue its products once barrier
// 1 + c opens (ping-pong, see the kernel).
constexpr int kTurnBarrier = 1;
constexpr int kConsumerThreads = 2 * wgmma::kWarpgroupThreads;

// Registers per thread after the hand-over: 24 x 128 + 240 x 256 fits the
// 64K register file.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(tma::HandOverFits(kProducerRegisters, 2, kConsumerRegisters),
              "the consumers would wait forever for registers");

// A tile is 128 rows x kD columns bf16: kD / 64 panels of 64 columns
// (wgmma.cuh). Shared memory, from the 1024-byte aligned base: Q,
// K[stages], V[stages], the output staging rows, then the barriers.
constexpr int kPanelBytes = 128 * 64 * 2;
template <int kD>
struct Layout {
  static constexpr int kPanels = kD / 64;
  static constexpr int kTileBytes = kPanels * kPanelBytes;
  static constexpr int kStages = kD == 64 ? 4 : 2;  // K/V tiles in flight
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kTileBytes;
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kOutOffset = kVOffset + kStages * kTileBytes;
  static constexpr int kBarrierOffset = kOutOffset + kTileBytes;
  static constexpr int kBarriers = 2 + 4 * kStages;  // q_full, k/v_full, k/v_empty, q_empty
  static constexpr int kItemOffset = kBarrierOffset + 8 * kBarriers;  // the item being copied
  static constexpr int kSmemBytes = kItemOffset + 8 + 1024;            // + alignment
};

template <int kStages>
struct Barriers {
  uint32_t base;
  __device__ uint32_t q_full() const { return base; }
  __device__ uint32_t k_full(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t v_full(int s) const { return base + 8 * (1 + kStages + s); }
  __device__ uint32_t k_empty(int s) const { return base + 8 * (1 + 2 * kStages + s); }
  __device__ uint32_t v_empty(int s) const { return base + 8 * (1 + 3 * kStages + s); }
  __device__ uint32_t q_empty() const { return base + 8 * (1 + 4 * kStages); }
};

// ---- kernels ---------------------------------------------------------------

// Masks tile j's raw scores for this thread's two rows (kMask: only tiles
// that hold a masked key for some row of the warpgroup need it), updates
// the running maxima m (log2 domain), turns the scores into probabilities
// with one fused multiply-add and exp2 each, and returns the factor alpha
// by which the earlier output and sums shrink; adds the tile's row sums
// (this thread's columns) to l. The maximum is taken before scaling, which
// the positive scale does not change.
template <bool kDocuments, bool kMask>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kBlockKV / 8][4], int64_t k0,
                                            int64_t row_lo, const int32_t (&first_key)[2],
                                            float scale_log2, int t, float (&m)[2],
                                            float (&l)[2], float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
  if constexpr (kMask) {
    // Columns of this tile before each of the lane's rows' document start,
    // and after each row (the future).
    const int32_t before[2] = {first_key[0] - static_cast<int32_t>(k0),
                               first_key[1] - static_cast<int32_t>(k0)};
    const int32_t last[2] = {static_cast<int32_t>(row_lo - k0),
                             static_cast<int32_t>(row_lo + 8 - k0)};
#pragma unroll
    for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        if (col > last[e >> 1] || (kDocuments && col < before[e >> 1])) s[nt][e] = -INFINITY;
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
  }
  float shift[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
    const float m_new = fmaxf(m[half], mx[half] * scale_log2);
    // A row with no key yet (documents only) keeps m = -inf but subtracts
    // 0, so that exp2 gives 0 rather than NaN.
    shift[half] = (kDocuments && m_new == -INFINITY) ? 0.f : m_new;
    alpha[half] = flash::FastExp2(m[half] - shift[half]);
    m[half] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < kBlockKV / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = flash::FastExp2(fmaf(s[nt][e], scale_log2, -shift[e >> 1]));
      sum[e >> 1] += s[nt][e];
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) l[half] = l[half] * alpha[half] + sum[half];
}

// Tile j's softmax, masked only where it must be: tiles that reach past
// the warpgroup's first row (the diagonal) or start before its last row's
// document start.
template <bool kDocuments>
__device__ __forceinline__ void Softmax(float (&s)[kBlockKV / 8][4], int64_t k0, int64_t row_lo,
                                        int64_t wg_q0, int64_t last_first_key,
                                        const int32_t (&first_key)[2], float scale_log2, int t,
                                        float (&m)[2], float (&l)[2], float (&alpha)[2]) {
  const bool diagonal = k0 + kBlockKV - 1 > wg_q0;
  const bool doc_edge = kDocuments && k0 < last_first_key;
  if (diagonal || doc_edge) {
    SoftmaxStep<kDocuments, true>(s, k0, row_lo, first_key, scale_log2, t, m, l, alpha);
  } else {
    SoftmaxStep<kDocuments, false>(s, k0, row_lo, first_key, scale_log2, t, m, l, alpha);
  }
}

// Key tiles [first_tile, end_tile) of a query block: from its first query's
// document start (0 without documents) to the diagonal.
struct KeyTiles {
  int first_tile, end_tile;
  int64_t q0, last_row;
};
template <bool kDocuments>
__device__ __forceinline__ KeyTiles KeyTilesOf(const AttentionParams& p, int b, int q_block) {
  KeyTiles k;
  k.q0 = int64_t(q_block) * kBlockQ;
  k.last_row = min(k.q0 + kBlockQ, p.seq) - 1;
  k.first_tile = static_cast<int>(flash::FirstKey<kDocuments>(p, b, k.q0) / kBlockKV);
  k.end_tile = static_cast<int>(k.last_row / kBlockKV) + 1;
  return k;
}

template <int kD, bool kDocuments>
__global__ void __launch_bounds__(kThreads, 1)
    WarpSpecializedForwardKernel(const __grid_constant__ CUtensorMap qkv_map, AttentionParams p,
                                 AttentionItemOrder order, int* next_item, __nv_bfloat16* out,
                                 float* lse) {
#ifdef TESSERA_WGMMA
  using L = Layout<kD>;
  constexpr int kStages = L::kStages, kTileBytes = L::kTileBytes;
  using KVRing = tma::Ring<kStages>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::AlignedSmem(smem_raw);
  const uint32_t base = SmemAddress(smem);
  const uint32_t s_q = base + L::kQOffset;
  const Barriers<kStages> bar{base + L::kBarrierOffset};
  volatile int* item_slot = reinterpret_cast<volatile int*>(smem + L::kItemOffset);
  const int items = order.items();
  // Where the ring's it-th key tile (counted over all of the block's items)
  // goes.
  auto k_tile = [&](int it) { return base + L::kKOffset + KVRing::Stage(it) * kTileBytes; };
  auto v_tile = [&](int it) { return base + L::kVOffset + KVRing::Stage(it) * kTileBytes; };

  if (threadIdx.x == 0) {
    tma::InitBarrier(bar.q_full(), 1);
    tma::InitBarrier(bar.q_empty(), kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      tma::InitBarrier(bar.k_full(s), 1);
      tma::InitBarrier(bar.v_full(s), 1);
      tma::InitBarrier(bar.k_empty(s), kConsumerWarps);
      tma::InitBarrier(bar.v_empty(s), kConsumerWarps);
    }
    tma::FenceBarrierInit();
  }
  __syncthreads();

  const int warpgroup = wgmma::WarpgroupIndex();
  if (warpgroup == 0) {
    // ---- producer ----
    tma::ShrinkRegisters<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::PrefetchMap(&qkv_map);
      int ring = 0;  // key tiles copied so far, over all items
      int index = static_cast<int>(blockIdx.x);
      for (int round = 0;; ++round) {
        // The item and its key tiles (with documents, a load of its first
        // query's start) are known before Q's buffer frees, which is when
        // the consumers' last S product of the previous item has read Q
        // (and they have read the item's number).
        AttentionItem w{};
        KeyTiles kt{};
        if (index < items) {
          w = AttentionItemOf(index, order);
          kt = KeyTilesOf<kDocuments>(p, w.b, w.q_block);
        }
        tma::Wait(bar.q_empty(), static_cast<uint32_t>((round & 1) ^ 1));
        *item_slot = index;
        if (index >= items) {
          tma::Arrive(bar.q_full());  // no more: the consumers stop
          break;
        }
        // The item after this one, taken now: the counter's answer is only
        // needed once this item's copies are issued.
        const int next = int(gridDim.x) + atomicAdd(next_item, 1);
        const int kv_head = w.h / (p.heads / p.kv_heads);
        const int k_head = p.heads + kv_head, v_head = p.heads + p.kv_heads + kv_head;
        tma::ArriveExpectBytes(bar.q_full(), kTileBytes);
        for (int panel = 0; panel < L::kPanels; ++panel) {
          tma::Load4d(s_q + panel * kPanelBytes, &qkv_map, 64 * panel, w.h,
                      static_cast<int>(kt.q0), w.b, bar.q_full());
        }
        for (int j = kt.first_tile; j < kt.end_tile; ++j, ++ring) {
          const int s = KVRing::Stage(ring);
          const int k0 = j * kBlockKV;
          tma::Wait(bar.k_empty(s), KVRing::FreeParity(ring));
          tma::ArriveExpectBytes(bar.k_full(s), kTileBytes);
          for (int panel = 0; panel < L::kPanels; ++panel) {
            tma::Load4d(k_tile(ring) + panel * kPanelBytes, &qkv_map, 64 * panel, k_head, k0,
                        w.b, bar.k_full(s));
          }
          tma::Wait(bar.v_empty(s), KVRing::FreeParity(ring));
          tma::ArriveExpectBytes(bar.v_full(s), kTileBytes);
          for (int panel = 0; panel < L::kPanels; ++panel) {
            tma::Load4d(v_tile(ring) + panel * kPanelBytes, &qkv_map, 64 * panel, v_head, k0,
                        w.b, bar.v_full(s));
          }
        }
        index = next;
      }
    }
    return;
  }

  // ---- consumers ----
  tma::GrowRegisters<kConsumerRegisters>();
  const int consumer = warpgroup - 1;  // owns queries [q0 + 64 consumer, + 64) of each item
  const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  auto release = [&](uint32_t empty) {
    if (lane == 0) tma::Arrive(empty);
  };
  // Ping-pong: the consumers take turns to issue their products, so that one
  // runs its softmax while the other's products hold the tensor cores.
  // Consumer 1 opens consumer 0's first turn; each then opens the other's
  // next turn after issuing, over all of the block's items. Consumer 0
  // takes one more turn after the last item: consumer 1's last opening.
  auto take_turn = [&] { tma::SyncNamed(kTurnBarrier + consumer, kConsumerThreads); };
  auto pass_turn = [&] { tma::ArriveNamed(kTurnBarrier + (1 - consumer), kConsumerThreads); };
  if (consumer == 1) tma::ArriveNamed(kTurnBarrier, kConsumerThreads);

  int ring = 0;  // key tiles consumed so far, over all items
  for (int round = 0;; ++round) {
    tma::Wait(bar.q_full(), static_cast<uint32_t>(round & 1));
    const int index = *item_slot;
    if (index >= items) break;
    const AttentionItem w = AttentionItemOf(index, order);
    const KeyTiles kt = KeyTilesOf<kDocuments>(p, w.b, w.q_block);
    const int64_t wg_q0 = kt.q0 + 64 * consumer;
    const int64_t row_lo = wg_q0 + 16 * warp + g;  // this lane's rows: row_lo, row_lo + 8
    const int64_t last_first_key = flash::FirstKey<kDocuments>(p, w.b, kt.last_row);
    const int32_t first_key[2] = {
        static_cast<int32_t>(flash::FirstKey<kDocuments>(p, w.b, row_lo)),
        static_cast<int32_t>(flash::FirstKey<kDocuments>(p, w.b, row_lo + 8))};

    float o[kD / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float s[kBlockKV / 8][4];
    uint32_t pa[kBlockKV / 16][4];
    float alpha[2];

    // First tile: scores and probabilities only.
    tma::Wait(bar.k_full(KVRing::Stage(ring)), KVRing::FullParity(ring));
    take_turn();
    wgmma::Fence();
    wgmma::MmaRowsTimesRowsT<kD, kBlockQ, kBlockKV>(s, s_q, 64 * consumer, k_tile(ring));
    wgmma::Commit();
    pass_turn();
    wgmma::Wait<0>();
    wgmma::FenceOperands(s);
    release(bar.k_empty(KVRing::Stage(ring)));
    Softmax<kDocuments>(s, int64_t(kt.first_tile) * kBlockKV, row_lo, wg_q0, last_first_key,
                        first_key, p.scale_log2, t, m, l, alpha);
#pragma unroll
    for (int kk = 0; kk < kBlockKV / 16; ++kk) wgmma::PackA(s, kk, pa[kk]);

    const int tiles = kt.end_tile - kt.first_tile;
    for (int it = 1; it < tiles; ++it) {
      const int r = ring + it;
      // S of this tile and P V of the previous one, issued back to back.
      // (Both waits come first: a branch between two products makes ptxas
      // fence the second.)
      tma::Wait(bar.k_full(KVRing::Stage(r)), KVRing::FullParity(r));
      tma::Wait(bar.v_full(KVRing::Stage(r - 1)), KVRing::FullParity(r - 1));
      take_turn();
      wgmma::Fence();
      wgmma::MmaRowsTimesRowsT<kD, kBlockQ, kBlockKV>(s, s_q, 64 * consumer, k_tile(r));
      wgmma::Commit();
      wgmma::MmaFragmentsTimesTile<kD, kBlockKV, kBlockKV / 16>(o, pa, v_tile(r - 1));
      wgmma::Commit();
      pass_turn();
      // Softmax of this tile while P V runs.
      wgmma::Wait<1>();
      wgmma::FenceOperands(s);
      release(bar.k_empty(KVRing::Stage(r)));
      Softmax<kDocuments>(s, int64_t(kt.first_tile + it) * kBlockKV, row_lo, wg_q0,
                          last_first_key, first_key, p.scale_log2, t, m, l, alpha);
      wgmma::Wait<0>();
      wgmma::FenceOperands(o);
      wgmma::FenceOperands(pa);
      release(bar.v_empty(KVRing::Stage(r - 1)));
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] *= alpha[e >> 1];
      }
#pragma unroll
      for (int kk = 0; kk < kBlockKV / 16; ++kk) wgmma::PackA(s, kk, pa[kk]);
    }
    // Every S product of this item has finished (and the item's number was
    // read): the producer may take the next item and copy its Q while the
    // last P V and the output's store run.
    release(bar.q_empty());
    // The last tile's P V.
    const int last = ring + tiles - 1;
    tma::Wait(bar.v_full(KVRing::Stage(last)), KVRing::FullParity(last));
    take_turn();
    wgmma::Fence();
    wgmma::MmaFragmentsTimesTile<kD, kBlockKV, kBlockKV / 16>(o, pa, v_tile(last));
    wgmma::Commit();
    pass_turn();
    wgmma::Wait<0>();
    wgmma::FenceOperands(o);
    wgmma::FenceOperands(pa);
    release(bar.v_empty(KVRing::Stage(last)));
    ring += tiles;

    // Staging: 64 rows of 2 kD bytes per consumer, 16 per warp.
    flash::StoreForwardRows<kD>(p, w.b, w.h, wg_q0 + 16 * warp, o, m, l,
                                smem + L::kOutOffset + consumer * 64 * kD * 2, 16 * warp, out,
                                lse, lane);
  }
  if (consumer == 0) take_turn();
#else
  __trap();
#endif
}

template <int kD, bool kDocuments>
absl::Status LaunchKernel(const CUtensorMap& map, const AttentionParams& p, int64_t batch,
                          int sm_count, size_t l2_bytes, int* work_counter, __nv_bfloat16* out,
                          float* lse, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};
  constexpr int kSmemBytes = Layout<kD>::kSmemBytes;
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(WarpSpecializedForwardKernel<kD, kDocuments>, kSmemBytes,
                                        smem_allowed));
  const int64_t q_blocks = (p.seq + kBlockQ - 1) / kBlockQ;
  const int64_t items = int64_t(p.heads) * batch * q_blocks;
  if (items > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: ", items, " query blocks of 128 (heads x batch x sequence / 128) exceed ",
        std::numeric_limits<int>::max()));
  }
  // One block per SM (its shared memory allows no more), each taking items
  // from the counter until they run out.
  const int blocks = static_cast<int>(std::min<int64_t>(items, std::max(sm_count, 1)));
  const AttentionItemOrder order =
      MakeAttentionItemOrder(batch, p.heads, p.kv_heads, p.seq, kD, kBlockQ, l2_bytes);
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(work_counter, 0, sizeof(int), stream));
  WarpSpecializedForwardKernel<kD, kDocuments><<<blocks, kThreads, kSmemBytes, stream>>>(
      map, p, order, work_counter, out, lse);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

template <int kD>
absl::Status Launch(const AttentionShape& shape, const void* qkv, const int32_t* doc_starts,
                    void* out, float* lse, int sm_count, size_t l2_bytes, int* work_counter,
                    cudaStream_t stream) {
  const absl::StatusOr<CUtensorMap> map = HeadRowsTensorMap(
      qkv, shape.batch, shape.seq, shape.heads + 2 * shape.kv_heads, kD, kBlockKV);
  if (!map.ok()) return map.status();
  const AttentionParams p = flash::MakeAttentionParams(shape, qkv, doc_starts);
  auto* o = static_cast<__nv_bfloat16*>(out);
  return doc_starts != nullptr
             ? LaunchKernel<kD, true>(*map, p, shape.batch, sm_count, l2_bytes, work_counter, o,
                                      lse, stream)
             : LaunchKernel<kD, false>(*map, p, shape.batch, sm_count, l2_bytes, work_counter, o,
                                       lse, stream);
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchFlashAttentionForward(const AttentionShape& shape, const void* qkv,
                                         const int32_t* doc_starts, void* out, float* lse,
                                         int sm_count, size_t l2_bytes, int* work_counter,
                                         cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  switch (shape.head_dim) {
    case 64:
      return Launch<64>(shape, qkv, doc_starts, out, lse, sm_count, l2_bytes, work_counter,
                        stream);
    case 128:
      return Launch<128>(shape, qkv, doc_starts, out, lse, sm_count, l2_bytes, work_counter,
                         stream);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention: head dim ", shape.head_dim, " is not supported (64 or 128)"));
  }
}

}  // namespace cuda
}  // namespace tessera

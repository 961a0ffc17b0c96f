// Hopper's tensor memory accelerator (TMA) and the shared-memory barriers
// that pace it, for kernels that split their warps into a producer, which
// only issues copies, and consumers, which only compute (sm_90a).
//
// A TMA copy moves a whole box of a tensor (described once, on the host, by a
// CUtensorMap) from global to shared memory without any thread holding the
// data, zero-filling what lies outside the tensor. It reports completion on
// an mbarrier by the number of bytes it wrote ("transaction count"), so a
// consumer waits for the data itself, not for the thread that asked for it.
//
// Barrier protocol for a ring of stages (full[s], empty[s] per stage s):
//  * the producer waits empty[s], announces the bytes on full[s]
//    (ArriveExpectBytes) and issues the copies that complete it;
//  * a consumer waits full[s], reads the stage, and arrives on empty[s].
// Barriers flip phase each time they complete; waiters name the parity of
// the phase they wait for. The u-th use of a stage waits full with parity
// u & 1 and empty with parity (u & 1) ^ 1: a fresh barrier counts as having
// completed the phase before its first, so the producer's first waits pass.
#ifndef TESSERA_WORKER_ENGINE_CUDA_TMA_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_TMA_CUH_

#include <cuda.h>

#include <cstdint>

#include "worker/engine/cuda/wgmma.cuh"

namespace tessera {
namespace cuda {
namespace tma {

// The ring protocol above for tile `it` of a ring of kStages stages: the
// stage it goes to, the parity its consumers wait for on full[stage], and
// the parity its producer waits for on empty[stage].
template <int kStages>
struct Ring {
  static __device__ __forceinline__ int Stage(int it) { return it % kStages; }
  static __device__ __forceinline__ uint32_t FullParity(int it) {
    return static_cast<uint32_t>((it / kStages) & 1);
  }
  static __device__ __forceinline__ uint32_t FreeParity(int it) { return FullParity(it) ^ 1; }
};

// Makes `count` arrivals (plus any announced bytes) complete a phase.
__device__ __forceinline__ void InitBarrier(uint32_t bar, uint32_t count) {
#ifdef TESSERA_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

// Makes the barriers initialised above visible to the TMA unit and to the
// other threads (which must still pass a block barrier after it).
__device__ __forceinline__ void FenceBarrierInit() {
#ifdef TESSERA_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of TMA traffic for this phase.
__device__ __forceinline__ void ArriveExpectBytes(uint32_t bar, uint32_t bytes) {
#ifdef TESSERA_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void Arrive(uint32_t bar) {
#ifdef TESSERA_WGMMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void Wait(uint32_t bar, uint32_t parity) {
#ifdef TESSERA_WGMMA
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// Copies the box at coordinates (c0, c1, c2, c3) of the 4-d tensor `map`
// into shared memory at `dst` (aligned as the map's swizzle requires),
// completing its bytes on `bar`.
__device__ __forceinline__ void Load4d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                       int c2, int c3, uint32_t bar) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}

// Copies `bytes` (a multiple of 16) contiguous bytes from global `src` to
// shared `dst` (both 16-byte aligned), completing them on `bar`.
__device__ __forceinline__ void LoadBytes(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// Copies `bytes` (a multiple of 16) contiguous bytes from shared `src` to
// global `dst` (both 16-byte aligned) as one bulk store. Shared memory that
// threads wrote must be made visible to the copy first (wgmma::ProxyFence
// by the writers, then a barrier). Completes in the thread's bulk group.
__device__ __forceinline__ void StoreBytes(void* dst, uint32_t src, uint32_t bytes) {
#ifdef TESSERA_WGMMA
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
#endif
}

// Adds `bytes` of fp32 in shared `src` element by element into global `dst`
// (same alignment as StoreBytes), in the L2, as one bulk reduction.
__device__ __forceinline__ void AddFloats(float* dst, uint32_t src, uint32_t bytes) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
#endif
}

// Closes the thread's bulk group and returns once every bulk store and
// reduction it issued has completed (its writes made, its sources read).
__device__ __forceinline__ void CommitAndDrainStores() {
#ifdef TESSERA_WGMMA
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// Closes the thread's bulk group and returns once every bulk store and
// reduction it issued has read its shared-memory source (its writes may
// still be on the way; CommitAndDrainStores before the thread exits).
__device__ __forceinline__ void CommitAndDrainStoreReads() {
#ifdef TESSERA_WGMMA
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}

// Orders global memory between the copy engine (async proxy) and ordinary
// loads and stores of this thread, in both directions.
__device__ __forceinline__ void ProxyFenceGlobal() {
#ifdef TESSERA_WGMMA
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void PrefetchMap(const CUtensorMap* map) {
#ifdef TESSERA_WGMMA
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// Registers per thread that a block of `threads` threads starts with at one
// block per SM (__launch_bounds__(threads, 1)): the 64K register file over
// the threads, in units of 8 (168 at 384 threads; ptxas gives kernels that
// hand registers over all of it).
constexpr int LaunchRegisters(int threads) { return 65536 / threads / 8 * 8; }

// Whether one producer warpgroup shrinking to `producer` registers frees
// enough for `consumers` warpgroups to grow to `consumer`. GrowRegisters
// waits until the registers it asks for are free, so a hand-over that does
// not fit what the block started with never finishes: the kernel hangs.
constexpr bool HandOverFits(int producer, int consumers, int consumer) {
  return producer + consumers * consumer <= (1 + consumers) * LaunchRegisters((1 + consumers) * 128);
}

// Hands registers between warpgroups: every warp of a warpgroup calls it
// with the same count; HandOverFits must hold.
template <int kRegisters>
__device__ __forceinline__ void ShrinkRegisters() {
#ifdef TESSERA_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void GrowRegisters() {
#ifdef TESSERA_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// Named barrier `id` (1-15; 0 is __syncthreads) over `threads` threads.
__device__ __forceinline__ void SyncNamed(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void ArriveNamed(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace tma
}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_TMA_CUH_

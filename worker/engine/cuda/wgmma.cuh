// Hopper warpgroup MMA (`wgmma.mma_async`, sm_90a) for the attention kernels:
// shared-memory tiles in the layout wgmma reads, their matrix descriptors,
// the bf16 m64nNk16 products with fp32 accumulators, and the fences that
// order them.
//
// A warpgroup (4 consecutive warps, 128 threads) multiplies a 64-row A by a
// B held in shared memory; A comes from shared memory too, or from
// registers. The tensor cores read the shared operands themselves, so no
// thread spends registers or ldmatrix bandwidth on them, which is what
// limits the sm_80-style `mma.sync` kernels at head dim 128.
//
// Tile layout. A tile of kRows rows x kD bf16 columns (one sequence position
// per row) is kD/64 panels of kRows 128-byte lines; panel p holds columns
// [64p, 64p + 64). The 16-byte chunk c of a line sits at chunk c ^ (row % 8)
// of that line (the 128-byte swizzle), and panels start at 1024-byte
// boundaries. wgmma reads such a tile either way round:
//  * K-major: the tile's columns are the contraction index (Q or K in
//    Q K^T). Descriptor stride between 8-row groups: 1024 bytes; stepping
//    16 columns inside a panel adds 32 bytes to the start address.
//  * MN-major: the tile's rows are the contraction index (V in P V).
//    Stride between 8-row groups 1024 bytes, between panels kRows * 128.
//
// Accumulators. Thread `lane` of warp w of the warpgroup holds, for a
// 64 x N product, d[n][0..1] = row 16 w + lane / 4, columns 8 n + 2 (lane % 4)
// + {0, 1}, and d[n][2..3] = the same columns of row 16 w + lane / 4 + 8:
// the mma.sync C layout, one warp per 16 rows. Two adjacent 8-column blocks
// re-packed to bf16 are an A fragment for the next product (PackA).
//
// Ordering. wgmma runs asynchronously: Fence() before issuing (after the
// accumulator or A registers were written), Commit() after, Wait<N>() before
// reading results, and FenceOperands() so that the compiler does not move
// accesses to the accumulators across those points. Shared memory written by
// threads (cp.async or stores) must be followed by ProxyFence() and a barrier
// before wgmma reads it.
#ifndef TESSERA_WORKER_ENGINE_CUDA_WGMMA_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_WGMMA_CUH_

#include <cuda_bf16.h>

#include <cstdint>

// wgmma exists on sm_90a only; the compute_90 PTX that the build also embeds
// gets empty bodies (the kernels that use them trap there).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TESSERA_WGMMA 1
#endif

namespace tessera {
namespace cuda {
namespace wgmma {

constexpr int kWarpgroupThreads = 128;

// This thread's warpgroup, read from lane 0 of its warp: the compiler then
// knows that every lane holds the same value and keeps what derives from it
// (the operands' descriptors) in uniform registers, instead of computing
// them per thread and copying them over before each product. The attention
// forward uses it (7% faster at 8192 tokens on an H200); the one-pass
// backward does not: with it, ptxas moved its own uniform work around and
// the kernel took 12% longer (bench/RESULTS.md).
__device__ __forceinline__ int WarpgroupIndex() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// Byte offset of 16-byte chunk `chunk` (columns [8 chunk, 8 chunk + 8)) of
// row `row` in a tile of kRows rows.
template <int kRows>
__device__ __forceinline__ uint32_t ChunkOffset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kRows * 128 + row * 128 +
                               (((chunk & 7) ^ (row & 7)) << 4));
}

// Starts copying rows [0, kRows) of a strided bf16 matrix (kD columns) into
// the tile at `tile`: row r from src + r * row_stride; rows >= valid_rows are
// zero-filled (`any` is a readable address for them).
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void LoadTileAsync(uint32_t tile, const __nv_bfloat16* src,
                                              int64_t row_stride, int64_t valid_rows,
                                              const void* any) {
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool inside = r < valid_rows;
    const void* from = inside ? static_cast<const void*>(src + r * row_stride + c * 8) : any;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     tile + ChunkOffset<kRows>(r, c)),
                 "l"(from), "r"(inside ? 16 : 0));
  }
}

// Matrix descriptor with the 128-byte swizzle (PTX ISA, "Matrix Descriptor
// Format") for the operand at `offset` bytes into the tile at shared
// address `tile`: start address, leading and stride byte offsets, all >> 4.
// Shared addresses lie below 256 KiB and tiles start at 1024-byte
// boundaries, so the start field is (tile >> 4) + (offset >> 4) with no carry
// into the next field: the part that depends on the tile is computed once
// per tile and each step of a product adds only a constant (a 16-byte
// multiple), instead of masking and shifting every address again.
__device__ __forceinline__ uint64_t Descriptor(uint32_t tile, uint32_t offset, uint32_t leading,
                                               uint32_t stride) {
  const uint32_t lo = ((tile >> 4) | ((leading >> 4) << 16)) + (offset >> 4);
  const uint32_t hi = (stride >> 4) | (1u << 30);
  return (uint64_t(hi) << 32) | lo;
}

// K-major operand: rows [row0, row0 + 64) (or the N rows of B) of a tile of
// kRows rows, contraction columns [16 kk, 16 kk + 16). row0 is a multiple of 8.
template <int kRows>
__device__ __forceinline__ uint64_t KMajor(uint32_t tile, int row0, int kk) {
  return Descriptor(tile, (kk >> 2) * kRows * 128 + row0 * 128 + (kk & 3) * 32, 16, 1024);
}

// MN-major operand: contraction rows [k0, k0 + 16) of a tile of kRows rows,
// output columns from col0 on (col0 a multiple of 8; the product's N or M
// columns may span panels).
template <int kRows>
__device__ __forceinline__ uint64_t MNMajor(uint32_t tile, int k0, int col0) {
  return Descriptor(tile, (col0 >> 6) * kRows * 128 + k0 * 128 + (col0 & 63) * 2, kRows * 128,
                    1024);
}

__device__ __forceinline__ void Fence() {
#ifdef TESSERA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void Commit() {
#ifdef TESSERA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void Wait() {
#ifdef TESSERA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Makes thread-written shared memory visible to wgmma (the async proxy).
__device__ __forceinline__ void ProxyFence() {
#ifdef TESSERA_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
template <int kN>
__device__ __forceinline__ void FenceOperands(float (&d)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
  }
}

// The same for A fragments that a product still in flight reads: keeps the
// compiler from reusing their registers before the Wait<N>() that follows.
template <int kN>
__device__ __forceinline__ void FenceOperands(uint32_t (&a)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[n][e])::"memory");
  }
}

// Columns [16 kt, 16 kt + 16) of an accumulator as the bf16 A fragment of a
// product that contracts over them.
template <int kN>
__device__ __forceinline__ void PackA(const float (&d)[kN][4], int kt, uint32_t (&a)[4]) {
  auto pack = [](float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  };
  a[0] = pack(d[2 * kt][0], d[2 * kt][1]);
  a[1] = pack(d[2 * kt][2], d[2 * kt][3]);
  a[2] = pack(d[2 * kt + 1][0], d[2 * kt + 1][1]);
  a[3] = pack(d[2 * kt + 1][2], d[2 * kt + 1][3]);
}

// ---- products (operand lists written out: wgmma names every register) ----

// d (64 x 64 fp32, this thread's part) (+)= A (64 x 16, shared memory) B (16 x 64,
// shared memory). accumulate = 0 overwrites d.
template <int kTransA, int kTransB>
__device__ __forceinline__ void MmaSS64(float (&d)[8][4], uint64_t a, uint64_t b,
                                        int accumulate) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
#endif
}

// d (64 x 32 fp32, this thread's part) (+)= A (64 x 16, shared memory) B (16 x 32,
// shared memory). accumulate = 0 overwrites d.
template <int kTransA, int kTransB>
__device__ __forceinline__ void MmaSS32(float (&d)[4][4], uint64_t a, uint64_t b,
                                        int accumulate) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
#endif
}

// d (64 x 64 fp32) (+)= A (64 x 16, registers: an mma.sync-style A fragment of
// this warp's 16 rows) B (16 x 64, shared memory).
template <int kTransB>
__device__ __forceinline__ void MmaRS64(float (&d)[8][4], const uint32_t (&a)[4],
                                        uint64_t b, int accumulate) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
#endif
}

// d (64 x 128 fp32, this thread's part) (+)= A (64 x 16, shared memory) B (16 x 128,
// shared memory). accumulate = 0 overwrites d.
template <int kTransA, int kTransB>
__device__ __forceinline__ void MmaSS128(float (&d)[16][4], uint64_t a, uint64_t b,
                                        int accumulate) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
#endif
}

// d (64 x 128 fp32) (+)= A (64 x 16, registers: an mma.sync-style A fragment of
// this warp's 16 rows) B (16 x 128, shared memory).
template <int kTransB>
__device__ __forceinline__ void MmaRS128(float (&d)[16][4], const uint32_t (&a)[4],
                                        uint64_t b, int accumulate) {
#ifdef TESSERA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
#endif
}


// ---- products over whole tiles ---------------------------------------------

// d (64 x kRowsB) = rows [a_row0, a_row0 + 64) of tile a (kRowsA rows) times
// the transpose of the kRowsB (64 or 128) rows of tile b, contracting over
// the kD columns: S = Q K^T and its kin. Issues the products; the caller
// fences, commits and waits.
template <int kD, int kRowsA, int kRowsB>
__device__ __forceinline__ void MmaRowsTimesRowsT(float (&d)[kRowsB / 8][4], uint32_t a_tile,
                                                  int a_row0, uint32_t b_tile) {
  static_assert(kRowsB == 64 || kRowsB == 128, "B supplies 64 or 128 output columns");
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t a = KMajor<kRowsA>(a_tile, a_row0, kk), b = KMajor<kRowsB>(b_tile, 0, kk);
    if constexpr (kRowsB == 128) {
      MmaSS128<0, 0>(d, a, b, kk > 0);
    } else {
      MmaSS64<0, 0>(d, a, b, kk > 0);
    }
  }
}

// d (64 x kD) += A (64 x 16 kSteps, as kSteps register fragments) times rows
// [0, 16 kSteps) of tile b (kRows rows, kD columns): O += P V and its kin.
template <int kD, int kRows, int kSteps>
__device__ __forceinline__ void MmaFragmentsTimesTile(float (&d)[kD / 8][4],
                                                      const uint32_t (&a)[kSteps][4],
                                                      uint32_t b_tile) {
#pragma unroll
  for (int kt = 0; kt < kSteps; ++kt) {
    if constexpr (kD == 128) {
      MmaRS128<1>(d, a[kt], MNMajor<kRows>(b_tile, 16 * kt, 0), 1);
    } else {
      static_assert(kD == 64, "head dim 64 or 128");
      MmaRS64<1>(d, a[kt], MNMajor<kRows>(b_tile, 16 * kt, 0), 1);
    }
  }
}

// Dynamic shared memory rounded up to the 1024-byte boundary the swizzled
// tiles need (kernels ask for 1024 bytes more than their tiles take).
__device__ __forceinline__ unsigned char* AlignedSmem(unsigned char* smem_raw) {
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return smem_raw + (((raw + 1023) & ~1023u) - raw);
}

}  // namespace wgmma
}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_WGMMA_CUH_

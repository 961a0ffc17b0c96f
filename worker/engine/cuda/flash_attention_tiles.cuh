// Building blocks of the tensor-core attention kernels
// (flash_attention_forward.cu, flash_attention_backward.cu): bf16 tiles in
// shared memory, asynchronous global->shared copies, ldmatrix fragment loads
// and the m16n8k16 bf16 MMA with fp32 accumulation (sm_80+ `mma.sync`).
//
// Tiles. A tile is kRows x kD bf16 values, one sequence position per row,
// stored as kD/8 chunks of 16 bytes per row. Chunk c of row r lives at chunk
// slot c ^ (r % 8) of that row: the eight rows an ldmatrix 8x8 matrix reads
// then hit eight different bank groups, so fragment loads are conflict-free
// both plain and transposed. Rows past the sequence end are zero-filled, so
// padded positions contribute nothing to any product.
//
// Fragments (PTX ISA, "mma.m16n8k16" layouts), for lane = 4 * g + t:
//  * A, 16x16 row-major: a0 (row g, cols 2t..2t+1), a1 (row g+8, same cols),
//    a2 (row g, cols 2t+8..), a3 (row g+8, cols 2t+8..).
//  * B, 16x8 "col": b0 (k rows 2t..2t+1, col g), b1 (k rows 2t+8.., col g).
//  * C/D, 16x8 fp32: c0 c1 (row g, cols 2t, 2t+1), c2 c3 (row g+8, same cols).
// Two C tiles side by side (16 x 16) re-packed to bf16 are exactly an A
// fragment, which is how P and dS feed the next product without a trip
// through shared memory.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shapes and pointers every attention kernel takes (see kernels.h for the
// tensor layouts). Strides are in elements.
struct AttentionParams {
  const __nv_bfloat16* qkv;   // [B, S, nh + 2 nkv, hd]
  int64_t seq;
  int heads, kv_heads;
  int64_t qkv_token_stride;   // (nh + 2 nkv) * hd
  int64_t out_token_stride;   // nh * hd
  float scale_log2;           // log2(e) / sqrt(hd)
};

inline AttentionParams MakeAttentionParams(const AttentionShape& shape, const void* qkv) {
  AttentionParams p;
  p.qkv = static_cast<const __nv_bfloat16*>(qkv);
  p.seq = shape.seq;
  p.heads = shape.heads;
  p.kv_heads = shape.kv_heads;
  p.qkv_token_stride = int64_t(shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  p.out_token_stride = int64_t(shape.heads) * shape.head_dim;
  p.scale_log2 = kLog2e / std::sqrt(static_cast<float>(shape.head_dim));
  return p;
}

// Raises `kernel`'s dynamic shared memory limit to `bytes` on the current
// device, once per device per process (`done` is the caller's bit set).
template <typename Kernel>
cudaError_t AllowDynamicSmem(Kernel kernel, int bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_release);
  return err;
}

// ---- PTX wrappers -----------------------------------------------------------

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void CommitAsyncCopies() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void WaitAsyncCopies() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void LoadMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d (16x8 fp32) += a (16x16 bf16) * b (16x8 bf16).
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as one bf16x2 register, the lower column in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- Tiles ------------------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of kD columns.
template <int kD>
__device__ __forceinline__ uint32_t ChunkOffset(int row, int chunk) {
  return static_cast<uint32_t>((row * (kD / 8) + (chunk ^ (row & 7))) * 16);
}

// Starts copying rows [0, kRows) of a strided bf16 matrix into the tile at
// `tile`: row r comes from src + r * row_stride, and rows >= valid_rows
// (possibly all of them) are zero-filled. `any` is a readable address used
// for the zero-filled rows.
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
    CopyAsync16(tile + ChunkOffset<kD>(r, c), from, inside ? 16 : 0);
  }
}

// A fragment of rows [row0, row0 + 16), columns [16 kk, 16 kk + 16).
template <int kD>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], uint32_t tile, int row0, int kk,
                                      int lane) {
  LoadMatrixX4(a, tile + ChunkOffset<kD>(row0 + (lane & 15), 2 * kk + (lane >> 4)));
}

// B fragments for two adjacent n-tiles when the tile holds B transposed
// (rows are n, columns are k: the K matrix in Q K^T). Rows [n0, n0 + 16),
// k columns [16 kk, 16 kk + 16): b[0], b[1] for n-tile n0, b[2], b[3] for n0 + 8.
template <int kD>
__device__ __forceinline__ void LoadBRowsAreN(uint32_t (&b)[4], uint32_t tile, int n0, int kk,
                                              int lane) {
  LoadMatrixX4(b, tile + ChunkOffset<kD>(n0 + (lane & 7) + ((lane >> 4) << 3),
                                         2 * kk + ((lane >> 3) & 1)));
}

// B fragments for two adjacent n-tiles when the tile holds B as stored
// (rows are k, columns are n: V in P V). k rows [k0, k0 + 16), n columns
// [8 nn, 8 nn + 16): b[0], b[1] for n-tile nn, b[2], b[3] for nn + 1.
template <int kD>
__device__ __forceinline__ void LoadBRowsAreK(uint32_t (&b)[4], uint32_t tile, int k0, int nn,
                                              int lane) {
  LoadMatrixX4Trans(b, tile + ChunkOffset<kD>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                              nn + (lane >> 4)));
}

// acc (16 kM x 8 kN) += rows [a_row0, a_row0 + 16 kM) of tile a times the
// transpose of rows [b_row0, b_row0 + 8 kN) of tile b (k runs over kD).
// acc[mt] holds rows a_row0 + 16 mt; each B fragment feeds kM products.
template <int kD, int kM, int kN>
__device__ __forceinline__ void MmaABt(float (&acc)[kM][kN][4], uint32_t a_tile, int a_row0,
                                       uint32_t b_tile, int b_row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) LoadA<kD>(a[mt], a_tile, a_row0 + 16 * mt, kk, lane);
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      uint32_t b[4];
      LoadBRowsAreN<kD>(b, b_tile, b_row0 + 16 * np, kk, lane);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        Mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        Mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc (16 kM x kD) += P (16 kM x 16 kK, held as C fragments p[kM][2 kK][4])
// times rows [b_row0, b_row0 + 16 kK) of tile b (rows are the k index).
template <int kD, int kM, int kK>
__device__ __forceinline__ void MmaPB(float (&acc)[kM][kD / 8][4],
                                      const float (&p)[kM][2 * kK][4], uint32_t b_tile,
                                      int b_row0, int lane) {
#pragma unroll
  for (int kt = 0; kt < kK; ++kt) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      a[mt][0] = PackBf16(p[mt][2 * kt][0], p[mt][2 * kt][1]);
      a[mt][1] = PackBf16(p[mt][2 * kt][2], p[mt][2 * kt][3]);
      a[mt][2] = PackBf16(p[mt][2 * kt + 1][0], p[mt][2 * kt + 1][1]);
      a[mt][3] = PackBf16(p[mt][2 * kt + 1][2], p[mt][2 * kt + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t b[4];
      LoadBRowsAreK<kD>(b, b_tile, b_row0 + 16 * kt, 2 * dp, lane);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        Mma(acc[mt][2 * dp], a[mt], b[0], b[1]);
        Mma(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Writes a warp's 16 x kD fp32 accumulator as bf16 to global rows
// [0, min(16, valid_rows)) of dst (row stride in elements), rows g scaled by
// scale_lo and rows g + 8 by scale_hi. The values are staged through the
// warp's own rows [row0, row0 + 16) of the tile at `tile` (which no other
// warp reads), so that the global stores are whole 16-byte chunks.
template <int kD>
__device__ __forceinline__ void StoreRows(const float (&acc)[kD / 8][4], float scale_lo,
                                          float scale_hi, unsigned char* tile, int row0,
                                          __nv_bfloat16* dst, int64_t row_stride,
                                          int64_t valid_rows, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const uint32_t lo = PackBf16(acc[nt][0] * scale_lo, acc[nt][1] * scale_lo);
    const uint32_t hi = PackBf16(acc[nt][2] * scale_hi, acc[nt][3] * scale_hi);
    *reinterpret_cast<uint32_t*>(tile + ChunkOffset<kD>(row0 + g, nt) + 4 * t) = lo;
    *reinterpret_cast<uint32_t*>(tile + ChunkOffset<kD>(row0 + g + 8, nt) + 4 * t) = hi;
  }
  __syncwarp();
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < valid_rows) {
      *reinterpret_cast<uint4*>(dst + r * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + ChunkOffset<kD>(row0 + r, c));
    }
  }
}

}  // namespace flash
}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_

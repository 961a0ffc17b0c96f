// The tiled FP8 cast-transpose shared by every op that ends in an FP8
// linear's input or gradient: Quantize's cast-transpose (quantize.cu) and the
// SwiGLU kernels that write FP8 directly (swiglu_quantize.cu); and the plain
// byte transpose of FP8 weights for the backward, which shares its second
// phase. The RMSNorm that writes FP8 (rmsnorm_quantize.cu) has its own block
// shape but encodes, reduces amax and turns bytes around with the helpers
// here (EncodeSegment, FinishCastTransposeBlock, TransposeBytes4x4). A `Producer`
// supplies the values, so an op can compute them in registers instead of
// writing a bf16 tensor for a separate cast to read back.
//
// A block of 256 threads owns a 64 x 64 tile of the [rows, cols] result.
// Phase 1: each thread takes two 8-value row segments from the producer,
// max-combines |v| into the tile's amax, encodes v * scale with Hopper's
// converter, writes the 8 codes to `out` (if any) with one 8-byte store and
// keeps them in shared memory. Phase 2 (WriteTransposedTile): each thread
// turns a 4 x 4 byte block of the tile around in registers and writes 4
// bytes to each of 4 rows of out_t [cols, rows], 16 lanes per 64-byte row,
// so both sides are coalesced.
// Block (0, 0) also publishes 1 / scale to out's and out_t's scale_inv. A
// pair variant owns one tile in each column half of the result, for
// producers that compute both halves from the same loads.
//
// A producer is a copyable struct with
//   __device__ void operator()(int64_t row, int64_t col, float (&v)[8]) const
// filling v with the values at [row, col .. col + 8) (col a multiple of 8).
#ifndef TESSERA_WORKER_ENGINE_CUDA_FP8_CAST_TRANSPOSE_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_FP8_CAST_TRANSPOSE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_device.cuh"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

inline constexpr int kCastTransposeTile = 64;
inline constexpr int kCastTransposeThreads = 256;
inline constexpr int kCastTransposeTileStride = kCastTransposeTile + 4;  // keeps words aligned

// A 4 x 4 byte block turned around: rows[q] holds bytes (q, 0..3), low byte
// first; columns[p] gets bytes (0..3, p).
__device__ __forceinline__ void TransposeBytes4x4(const uint32_t (&rows)[4], uint32_t (&columns)[4]) {
  const uint32_t lo01 = __byte_perm(rows[0], rows[1], 0x5140);
  const uint32_t lo23 = __byte_perm(rows[2], rows[3], 0x5140);
  const uint32_t hi01 = __byte_perm(rows[0], rows[1], 0x7362);
  const uint32_t hi23 = __byte_perm(rows[2], rows[3], 0x7362);
  columns[0] = __byte_perm(lo01, lo23, 0x5410);
  columns[1] = __byte_perm(lo01, lo23, 0x7632);
  columns[2] = __byte_perm(hi01, hi23, 0x5410);
  columns[3] = __byte_perm(hi01, hi23, 0x7632);
}

// Phase 2 of the tiled kernels below: `tile` holds a 64 x 64 byte tile
// (row stride kCastTransposeTileStride) of a [rows, cols] byte matrix at
// (row0, col0); writes it to out_t [cols, rows]. Thread (i, j) of 256 owns
// tile rows 4j..4j+3 and columns 4i..4i+3, turns that 4 x 4 byte block
// around in registers and writes 4 bytes to each of 4 rows of out_t, 16
// lanes per 64-byte row, so the stores are coalesced.
__device__ __forceinline__ void WriteTransposedTile(const uint8_t* tile, uint8_t* out_t,
                                                    int64_t rows, int64_t row0, int64_t col0) {
  constexpr int kStride = kCastTransposeTileStride;
  const int j = threadIdx.x % 16, i = threadIdx.x / 16;
  uint32_t w[4], column_codes[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    w[q] = *reinterpret_cast<const uint32_t*>(tile + (4 * j + q) * kStride + 4 * i);
  }
  TransposeBytes4x4(w, column_codes);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    *reinterpret_cast<uint32_t*>(out_t + (col0 + 4 * i + p) * rows + row0 + 4 * j) = column_codes[p];
  }
}

// Phase 1 for one 8-value segment: |v| into `local` (the thread's amax),
// v * s encoded, the 8 codes written to `out_codes` (if not null) with one
// 8-byte store and kept in the tile at `tile_slot`.
template <bool kE5M2>
__device__ __forceinline__ void EncodeSegment(const float (&v)[8], float s, uint8_t* out_codes,
                                              uint8_t* tile_slot, float& local) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (!isnan(v[k])) local = fmaxf(local, fabsf(v[k]));
  }
  const uint32_t lo = EncodeFp8x4<kE5M2>(v[0] * s, v[1] * s, v[2] * s, v[3] * s);
  const uint32_t hi = EncodeFp8x4<kE5M2>(v[4] * s, v[5] * s, v[6] * s, v[7] * s);
  if (out_codes != nullptr) *reinterpret_cast<uint2*>(out_codes) = make_uint2(lo, hi);
  uint32_t* slot = reinterpret_cast<uint32_t*>(tile_slot);
  slot[0] = lo;
  slot[1] = hi;
}

// The block's amax into `amax`, and (block (0, 0)) 1 / s into the scale_invs.
__device__ __forceinline__ void FinishCastTransposeBlock(float local, float s, float* scale_inv,
                                                         float* out_t_scale_inv, float* amax) {
  __shared__ float warp_max[kCastTransposeThreads / 32];
  local = WarpMax(local);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    float block = warp_max[0];
    for (int k = 1; k < kCastTransposeThreads / 32; ++k) block = fmaxf(block, warp_max[k]);
    if (amax != nullptr) AtomicMaxNonNegative(amax, block);
    if (blockIdx.x == 0 && blockIdx.y == 0) {
      if (scale_inv != nullptr) *scale_inv = 1.0f / s;
      if (out_t_scale_inv != nullptr) *out_t_scale_inv = 1.0f / s;
    }
  }
}

template <typename Producer, bool kE5M2>
__global__ void __launch_bounds__(kCastTransposeThreads)
    CastTransposeTiledKernel(Producer produce, uint8_t* out, uint8_t* out_t, int64_t rows,
                             int64_t cols, const float* scale, float* scale_inv,
                             float* out_t_scale_inv, float* amax) {
  constexpr int kTile = kCastTransposeTile, kStride = kCastTransposeTileStride;
  __shared__ __align__(16) uint8_t tile[kTile * kStride];
  const float s = *scale;
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  float local = 0.f;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int segment = threadIdx.x + pass * kCastTransposeThreads;  // 8 segments per tile row
    const int r = segment / 8, c = (segment % 8) * 8;
    float v[8];
    produce(row0 + r, col0 + c, v);
    EncodeSegment<kE5M2>(v, s, out != nullptr ? out + (row0 + r) * cols + col0 + c : nullptr,
                         tile + r * kStride + c, local);
  }
  __syncthreads();
  WriteTransposedTile(tile, out_t, rows, row0, col0);
  FinishCastTransposeBlock(local, s, scale_inv, out_t_scale_inv, amax);
}

// The same for a result whose two column halves come from the same loads
// (the SwiGLU gradient: d_gate in [0, cols/2), d_up in [cols/2, cols), both
// from one read of gate, up and the output gradient). A block owns the 64 x
// 64 tile at (row0, col0) of the first half and the one at (row0, half +
// col0) of the second; a pair producer is a copyable struct with
//   __device__ void operator()(int64_t row, int64_t col, float (&first)[8],
//                              float (&second)[8]) const
// filling the values at [row, col .. col + 8) and [row, half + col ..).
// Bit for bit the single-tile kernel's output for the same values.
template <typename PairProducer, bool kE5M2>
__global__ void __launch_bounds__(kCastTransposeThreads)
    CastTransposeTiledPairKernel(PairProducer produce, uint8_t* out, uint8_t* out_t, int64_t rows,
                                 int64_t cols, const float* scale, float* scale_inv,
                                 float* out_t_scale_inv, float* amax) {
  constexpr int kTile = kCastTransposeTile, kStride = kCastTransposeTileStride;
  __shared__ __align__(16) uint8_t tiles[2][kTile * kStride];
  const float s = *scale;
  const int64_t half = cols / 2;
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  float local = 0.f;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int segment = threadIdx.x + pass * kCastTransposeThreads;
    const int r = segment / 8, c = (segment % 8) * 8;
    float first[8], second[8];
    produce(row0 + r, col0 + c, first, second);
    uint8_t* row_codes = out != nullptr ? out + (row0 + r) * cols + col0 + c : nullptr;
    EncodeSegment<kE5M2>(first, s, row_codes, tiles[0] + r * kStride + c, local);
    EncodeSegment<kE5M2>(second, s, row_codes != nullptr ? row_codes + half : nullptr,
                         tiles[1] + r * kStride + c, local);
  }
  __syncthreads();
  WriteTransposedTile(tiles[0], out_t, rows, row0, col0);
  WriteTransposedTile(tiles[1], out_t, rows, row0, half + col0);
  FinishCastTransposeBlock(local, s, scale_inv, out_t_scale_inv, amax);
}

// Whether a [rows, cols] result can take the tiled kernel: whole tiles, and
// out (8-byte stores) and out_t (4-byte stores) aligned. The producer's own
// loads have their own conditions.
inline bool FitsCastTransposeTiles(int64_t rows, int64_t cols, const TensorDesc& out,
                                   const TensorDesc& out_t) {
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return rows > 0 && cols > 0 && rows % kCastTransposeTile == 0 &&
         cols % kCastTransposeTile == 0 && rows / kCastTransposeTile <= 65535 &&
         cols / kCastTransposeTile <= int64_t{1} << 30 && aligned(out.data, 8) &&
         aligned(out_t.data, 4);
}

// Launches the tiled kernel for FP8 `out` [rows, cols] (data may be null)
// and `out_t` [cols, rows], e4m3 or e5m2 as out.dtype says, with out's
// scale, scale_inv and amax and out_t's scale_inv. Checks the launch.
template <typename Producer>
cudaError_t LaunchCastTransposeTiled(const Producer& produce, int64_t rows, int64_t cols,
                                     const TensorDesc& out, const TensorDesc& out_t,
                                     cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(cols / kCastTransposeTile),
                  static_cast<unsigned>(rows / kCastTransposeTile));
  uint8_t* codes = static_cast<uint8_t*>(out.data);
  uint8_t* codes_t = static_cast<uint8_t*>(out_t.data);
  if (out.dtype == DType::kE5M2) {
    CastTransposeTiledKernel<Producer, true><<<grid, kCastTransposeThreads, 0, stream>>>(
        produce, codes, codes_t, rows, cols, out.scale, out.scale_inv, out_t.scale_inv, out.amax);
  } else {
    CastTransposeTiledKernel<Producer, false><<<grid, kCastTransposeThreads, 0, stream>>>(
        produce, codes, codes_t, rows, cols, out.scale, out.scale_inv, out_t.scale_inv, out.amax);
  }
  return cudaGetLastError();
}

// The pair kernel for a [rows, cols] result whose halves are produced
// together; needs FitsCastTransposeTiles and cols / 2 a multiple of 64.
template <typename PairProducer>
cudaError_t LaunchCastTransposeTiledPairs(const PairProducer& produce, int64_t rows, int64_t cols,
                                          const TensorDesc& out, const TensorDesc& out_t,
                                          cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(cols / 2 / kCastTransposeTile),
                  static_cast<unsigned>(rows / kCastTransposeTile));
  uint8_t* codes = static_cast<uint8_t*>(out.data);
  uint8_t* codes_t = static_cast<uint8_t*>(out_t.data);
  if (out.dtype == DType::kE5M2) {
    CastTransposeTiledPairKernel<PairProducer, true><<<grid, kCastTransposeThreads, 0, stream>>>(
        produce, codes, codes_t, rows, cols, out.scale, out.scale_inv, out_t.scale_inv, out.amax);
  } else {
    CastTransposeTiledPairKernel<PairProducer, false><<<grid, kCastTransposeThreads, 0, stream>>>(
        produce, codes, codes_t, rows, cols, out.scale, out.scale_inv, out_t.scale_inv, out.amax);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FP8_CAST_TRANSPOSE_CUH_

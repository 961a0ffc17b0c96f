// Pieces shared by the attention kernels (flash_attention_forward*.cu,
// flash_attention_backward*.cu) besides the wgmma products (wgmma.cuh) and
// the asynchronous copies (device_util.cuh): the shapes and pointers they
// take, where each query's document starts, exp2, the forwards' epilogue,
// and the store that writes a warp's 16 x kD fp32 accumulator rows
// (the mma.sync / wgmma C layout: lane = 4 g + t holds row g, columns
// 8 n + 2 t + {0, 1} in acc[n][0..1] and row g + 8 in acc[n][2..3]) as bf16.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "worker/engine/cuda/device_util.cuh"
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
  // [B, S]: where the document holding each query starts (Ops::AttentionForward);
  // nullptr when every sequence is one document.
  const int32_t* doc_starts;
};

inline AttentionParams MakeAttentionParams(const AttentionShape& shape, const void* qkv,
                                           const int32_t* doc_starts) {
  AttentionParams p;
  p.qkv = static_cast<const __nv_bfloat16*>(qkv);
  p.doc_starts = doc_starts;
  p.seq = shape.seq;
  p.heads = shape.heads;
  p.kv_heads = shape.kv_heads;
  p.qkv_token_stride = int64_t(shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  p.out_token_stride = int64_t(shape.heads) * shape.head_dim;
  p.scale_log2 = kLog2e / std::sqrt(static_cast<float>(shape.head_dim));
  return p;
}

// The first key query `row` of sequence b may attend to: its document's
// start, 0 without documents. Rows past the sequence (the padding of a
// last, partial tile) take the last row's. The value is clamped into
// [0, row], so that no content of doc_starts can make a kernel read outside
// the sequence or leave a row without keys (its own key is never masked);
// the engine does not otherwise check the content, which would cost a
// host round trip (the CPU engine, the specification, does).
// kDocuments false (the kernels' whole-sequence build) gives 0 at compile
// time, so those kernels carry none of the document code.
template <bool kDocuments = true>
__device__ __forceinline__ int64_t FirstKey(const AttentionParams& p, int b, int64_t row) {
  if (!kDocuments || p.doc_starts == nullptr) return 0;
  const int64_t r = row < p.seq ? row : p.seq - 1;
  const int64_t start = p.doc_starts[int64_t(b) * p.seq + r];
  return start < 0 ? 0 : (start > r ? r : start);
}

// ---- PTX wrappers -----------------------------------------------------------

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

// Byte offset of 16-byte chunk `chunk` of row `row` in a staging tile of kD
// columns; chunk c of row r sits at slot c ^ (r % 8), so that the eight rows
// a warp writes at once hit different banks.
template <int kD>
__device__ __forceinline__ uint32_t ChunkOffset(int row, int chunk) {
  return static_cast<uint32_t>((row * (kD / 8) + (chunk ^ (row & 7))) * 16);
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

// The forwards' epilogue for one warp's 16 query rows from row0 (head h of
// sequence b): completes this lane's partial row sums l over the row's four
// lanes, then writes lse = ln(l) + m (m in the log2 domain) and out = o / l,
// staged through rows [stage_row, stage_row + 16) of the tile at `stage`
// (StoreRows). Rows past the sequence are skipped.
template <int kD>
__device__ __forceinline__ void StoreForwardRows(const AttentionParams& p, int b, int h,
                                                 int64_t row0, const float (&o)[kD / 8][4],
                                                 const float (&m)[2], float (&l)[2],
                                                 unsigned char* stage, int stage_row,
                                                 __nv_bfloat16* out, float* lse, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const int64_t lse_row0 = (int64_t(b) * p.heads + h) * p.seq;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    const int64_t row = row0 + g + 8 * half;
    if (t == 0 && row < p.seq) lse[lse_row0 + row] = (m[half] + __log2f(l[half])) * kLn2;
  }
  if (row0 < p.seq) {
    StoreRows<kD>(o, 1.f / l[0], 1.f / l[1], stage, stage_row,
                  out + (int64_t(b) * p.seq + row0) * p.out_token_stride + int64_t(h) * kD,
                  p.out_token_stride, p.seq - row0, lane);
  }
}

}  // namespace flash
}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FLASH_ATTENTION_TILES_CUH_

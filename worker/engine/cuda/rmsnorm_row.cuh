// The per-row pieces of RMSNorm's register fast path, shared by the RMSNorm
// kernels (rmsnorm.cu) and the RMSNorm that writes FP8 (rmsnorm_quantize.cu).
// The fused op promises the same bits as RmsNormForward followed by
// QuantizeTranspose, so for a row both must agree on everything that decides
// the bits: the row group shape (WithRowShape), which elements each thread
// holds, the order of the sum of squares (each thread over its vectors, a
// butterfly within each warp, then the group's warps in order), the rstd
// formula and the normalisation's evaluation order. They all live here.
//
// A row group is kRowThreads consecutive threads (32..256, whole warps) of a
// kRowBlockThreads block; thread `lane` of the group holds vectors k =
// 0..kVecs-1 of 8 elements starting at column (k * kRowThreads + lane) * 8,
// so each of the group's loads is coalesced.
#ifndef TESSERA_WORKER_ENGINE_CUDA_RMSNORM_ROW_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_RMSNORM_ROW_CUH_

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "worker/engine/cuda/device_util.cuh"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

inline constexpr int kRowBlockThreads = 256;
// 8-element vectors (16 bytes of bf16, 32 of fp32). A row group holds one
// vector per thread (H <= 2048), or 256 threads hold 2 or 4 (H <= 8192).
// One vector per thread measured fastest on H100: short per-thread chains,
// many resident warps.
inline constexpr int kRowVecWidth = 8;
inline constexpr int kRowMaxVecs = 4;
inline constexpr int64_t kMaxRegisterRowWidth =
    int64_t{kRowBlockThreads} * kRowMaxVecs * kRowVecWidth;

// Elements [i, i + 8) of an fp32 or bf16 array (i a multiple of 8, the array
// 16-byte aligned): one 16-byte load for bf16, two for fp32.
__device__ __forceinline__ void Load8(const void* p, int dtype, int64_t i,
                                      float (&v)[kRowVecWidth]) {
  if (dtype == static_cast<int>(DType::kFloat32)) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = q[0], b = q[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p) + i);
    const uint32_t pairs[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; ++k) {  // bf16 -> fp32 is exact: the bits move up 16
      v[2 * k] = __uint_as_float(pairs[k] << 16);
      v[2 * k + 1] = __uint_as_float(pairs[k] & 0xffff0000u);
    }
  }
}

// Stores v into elements [i, i + 8), rounding to nearest even for bf16.
__device__ __forceinline__ void Store8(void* p, int dtype, int64_t i,
                                       const float (&v)[kRowVecWidth]) {
  if (dtype == static_cast<int>(DType::kFloat32)) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint32_t pairs[4];
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
      pairs[k] = *reinterpret_cast<const uint32_t*>(&b);
    }
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p) + i) =
        make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

// First column of vector k of thread `lane` of a row group: the group's
// threads read adjacent vectors, so each of its loads is coalesced.
template <int kRowThreads>
__device__ __forceinline__ int64_t VecColumn(int k, int lane) {
  return (int64_t{k} * kRowThreads + lane) * kRowVecWidth;
}

// This thread's vectors of row `row` of x [T, h] (those inside the row; none
// when !live).
template <int kRowThreads, int kVecs>
__device__ __forceinline__ void LoadRowVecs(const void* x, int dx, int64_t row, int64_t h, int lane,
                                            bool live, float (&xv)[kVecs][kRowVecWidth]) {
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t c = VecColumn<kRowThreads>(k, lane);
    if (live && c < h) Load8(x, dx, row * h + c, xv[k]);
  }
}

// This thread's part of the row's sum of squares: its vectors in order, each
// element in order.
template <int kRowThreads, int kVecs>
__device__ __forceinline__ float SumOfSquares(const float (&xv)[kVecs][kRowVecWidth], int64_t h,
                                              int lane, bool live) {
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t c = VecColumn<kRowThreads>(k, lane);
    if (live && c < h) {
#pragma unroll
      for (int e = 0; e < kRowVecWidth; ++e) ss += xv[k][e] * xv[k][e];
    }
  }
  return ss;
}

// v[i] summed over the kRowThreads threads of this thread's row group, for
// kValues independent values at once (one per row the group holds), each in
// the same fixed order: a butterfly within each warp (bitwise the same on
// every lane), then the group's warps in order. Every thread of the block
// must call it (it synchronizes the block when a group spans several warps).
// warp_sums: kValues * kRowBlockThreads / 32 floats of shared memory.
template <int kRowThreads, int kValues>
__device__ __forceinline__ void RowGroupSums(float (&v)[kValues], float* warp_sums) {
#pragma unroll
  for (int i = 0; i < kValues; ++i) v[i] = WarpSum(v[i]);
  if constexpr (kRowThreads > 32) {
    constexpr int kWarps = kRowThreads / 32, kBlockWarps = kRowBlockThreads / 32;
    const int warp = threadIdx.x / 32;
    __syncthreads();  // the previous call's readers are done with warp_sums
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int i = 0; i < kValues; ++i) warp_sums[i * kBlockWarps + warp] = v[i];
    }
    __syncthreads();
    const int first = warp / kWarps * kWarps;
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      float s = 0.f;
      for (int w = 0; w < kWarps; ++w) s += warp_sums[i * kBlockWarps + first + w];
      v[i] = s;
    }
  }
}

template <int kRowThreads>
__device__ __forceinline__ float RowGroupSum(float v, float* warp_sums) {
  float values[1] = {v};
  RowGroupSums<kRowThreads, 1>(values, warp_sums);
  return values[0];
}

// As the CPU: IEEE sqrt, then divide.
__device__ __forceinline__ float RowRstd(float sum_of_squares, int64_t h, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(h) + eps);
}

// o = x * rstd * w, in that order (the CPU's (x * r) * w).
__device__ __forceinline__ void Normalize8(const float (&x)[kRowVecWidth], float r,
                                           const float (&w)[kRowVecWidth],
                                           float (&o)[kRowVecWidth]) {
#pragma unroll
  for (int e = 0; e < kRowVecWidth; ++e) o[e] = x[e] * r * w[e];
}

// Normalize8, each value rounded to bf16 (nearest even) as Store8 stores it
// into a bf16 tensor: the values RmsNormForward's bf16 output holds.
__device__ __forceinline__ void Normalize8ToBf16(const float (&x)[kRowVecWidth], float r,
                                                 const float (&w)[kRowVecWidth],
                                                 float (&o)[kRowVecWidth]) {
  Normalize8(x, r, w, o);
#pragma unroll
  for (int e = 0; e < kRowVecWidth; ++e) o[e] = __bfloat162float(__float2bfloat16_rn(o[e]));
}

// Calls launch(threads, vecs) with the fast-path shape for rows of width h
// (as std::integral_constant): the fewest threads per row (32..256) that
// hold the row in one vector each, else 256 threads of 2 or 4 vectors.
template <typename Launch>
void WithRowShape(int64_t h, Launch&& launch) {
  using std::integral_constant;
  if (h <= 32 * kRowVecWidth) {
    launch(integral_constant<int, 32>(), integral_constant<int, 1>());
  } else if (h <= 64 * kRowVecWidth) {
    launch(integral_constant<int, 64>(), integral_constant<int, 1>());
  } else if (h <= 128 * kRowVecWidth) {
    launch(integral_constant<int, 128>(), integral_constant<int, 1>());
  } else if (h <= 256 * kRowVecWidth) {
    launch(integral_constant<int, 256>(), integral_constant<int, 1>());
  } else if (h <= 256 * 2 * kRowVecWidth) {
    launch(integral_constant<int, 256>(), integral_constant<int, 2>());
  } else {
    launch(integral_constant<int, 256>(), integral_constant<int, kRowMaxVecs>());
  }
}

// Whether rows of width h over these tensors take the fast path: fp32 or
// bf16, 16-byte aligned, h a multiple of 8 and at most kMaxRegisterRowWidth.
inline bool RowsFitRegisters(int64_t h, std::initializer_list<const TensorDesc*> tensors) {
  if (h % kRowVecWidth != 0 || h == 0 || h > kMaxRegisterRowWidth) return false;
  for (const TensorDesc* d : tensors) {
    if (d->dtype != DType::kFloat32 && d->dtype != DType::kBFloat16) return false;
    if (reinterpret_cast<uintptr_t>(d->data) % 16 != 0) return false;
  }
  return true;
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_RMSNORM_ROW_CUH_

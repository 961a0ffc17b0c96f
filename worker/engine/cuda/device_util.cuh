// Small device helpers shared by the CUDA kernels: dtype-dispatched loads and
// stores of fp32/bf16 elements, block-wide reductions, asynchronous
// global->shared copies, and the opt-in to large dynamic shared memory.
#ifndef TESSERA_WORKER_ENGINE_CUDA_DEVICE_UTIL_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

// Eight bf16 in one 16-byte word, as four pairs: for 16-byte loads and
// stores.
union Bf16x8 {
  uint4 raw;
  __nv_bfloat162 pair[4];
};

// Eight bf16 in one 16-byte word, widened exactly to fp32.
__device__ __forceinline__ void Bf16x8AsFloats(const uint4 raw, float (&v)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(words[k] << 16);
    v[2 * k + 1] = __uint_as_float(words[k] & 0xFFFF0000u);
  }
}

// Eight bf16 from one 16-byte load, widened exactly to fp32.
__device__ __forceinline__ void LoadBf16x8AsFloats(const __nv_bfloat16* p, float (&v)[8]) {
  Bf16x8AsFloats(*reinterpret_cast<const uint4*>(p), v);
}

// dtype is DType::kFloat32 or DType::kBFloat16 (as int, for kernel params).
__device__ __forceinline__ float LoadF(const void* p, int dtype, int64_t i) {
  if (dtype == static_cast<int>(DType::kFloat32)) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ __forceinline__ void StoreF(void* p, int dtype, int64_t i, float v) {
  if (dtype == static_cast<int>(DType::kFloat32)) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  }
}

// Calls visit(v) with every element of an fp32 or bf16 tensor of n elements
// (dtype as in LoadF), as a float, in a grid-stride loop over the whole
// grid: 16-byte loads (four fp32 or eight bf16) where `in` is 16-byte
// aligned, then one element at a time for the rest. For reductions whose
// result does not depend on the order the elements come in (a maximum, an
// integer count): a scalar loop of 2-byte loads leaves HBM mostly idle.
template <typename Visit>
__device__ __forceinline__ void ForEachElementVectorized(const void* in, int dtype, int64_t n,
                                                         Visit&& visit) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const bool fp32 = dtype == static_cast<int>(DType::kFloat32);
  const int width = fp32 ? 4 : 8;
  int64_t vectors = 0;
  if ((reinterpret_cast<uintptr_t>(in) & 15) == 0) {
    vectors = n / width;
    const uint4* words = static_cast<const uint4*>(in);
    for (int64_t i = first; i < vectors; i += stride) {
      const uint4 raw = words[i];
      if (fp32) {
        visit(__uint_as_float(raw.x));
        visit(__uint_as_float(raw.y));
        visit(__uint_as_float(raw.z));
        visit(__uint_as_float(raw.w));
      } else {
        float v[8];
        Bf16x8AsFloats(raw, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) visit(v[k]);
      }
    }
  }
  for (int64_t i = vectors * width + first; i < n; i += stride) {
    visit(fp32 ? static_cast<const float*>(in)[i]
               : __bfloat162float(static_cast<const __nv_bfloat16*>(in)[i]));
  }
}


__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : 0.f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

inline int BlocksFor(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 8 ? (b < 1 ? 1 : b) : 65535 * 8);
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

// ---- asynchronous global->shared copies (cp.async) ----------------------

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

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_DEVICE_UTIL_CUH_

// Elementwise ops on the GPU: out = a + b (residual connections) and casts
// between fp32 and bf16, in fp32 arithmetic rounded to the output dtype.
//
// Both are memory-bound. When every pointer is 16-byte aligned, a fast path
// templated on the element types moves 8 elements per thread per step as
// 16-byte vectors (two for fp32), and the last n % 8 elements one per
// thread. Otherwise the general kernels run, one dtype-dispatched element
// per thread. Either way each element is one fp32 add (or none) and one
// round to nearest even, so the results are bit-identical, and a thread
// reads an element before writing it: out may alias an input of its dtype.
//
// Determinism: no reductions; each output element depends on its inputs
// only, so the bits are the same whatever the launch shape.

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// Elements per fast-path thread and step.
constexpr int kVector = 8;

// ---- kernels ---------------------------------------------------------------

__global__ void AddKernel(const void* a, int da, const void* b, int db, void* out, int dout,
                          int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    StoreF(out, dout, i, LoadF(a, da, i) + LoadF(b, db, i));
  }
}

__global__ void CastKernel(const void* in, int din, void* out, int dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    StoreF(out, dout, i, LoadF(in, din, i));
  }
}

// Fast-path element access: vector v is elements [8v, 8v + 8).
__device__ __forceinline__ void Load8(const float* p, int64_t v, float (&x)[kVector]) {
  const float4 lo = reinterpret_cast<const float4*>(p)[2 * v];
  const float4 hi = reinterpret_cast<const float4*>(p)[2 * v + 1];
  x[0] = lo.x;
  x[1] = lo.y;
  x[2] = lo.z;
  x[3] = lo.w;
  x[4] = hi.x;
  x[5] = hi.y;
  x[6] = hi.z;
  x[7] = hi.w;
}

__device__ __forceinline__ void Load8(const __nv_bfloat16* p, int64_t v, float (&x)[kVector]) {
  Bf16x8 bits;
  bits.raw = reinterpret_cast<const uint4*>(p)[v];
#pragma unroll
  for (int k = 0; k < kVector / 2; ++k) {
    const float2 f = __bfloat1622float2(bits.pair[k]);
    x[2 * k] = f.x;
    x[2 * k + 1] = f.y;
  }
}

__device__ __forceinline__ void Store8(float* p, int64_t v, const float (&x)[kVector]) {
  reinterpret_cast<float4*>(p)[2 * v] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[2 * v + 1] = make_float4(x[4], x[5], x[6], x[7]);
}

__device__ __forceinline__ void Store8(__nv_bfloat16* p, int64_t v, const float (&x)[kVector]) {
  Bf16x8 bits;
#pragma unroll
  for (int k = 0; k < kVector / 2; ++k) {
    bits.pair[k] = __floats2bfloat162_rn(x[2 * k], x[2 * k + 1]);  // RNE, as __float2bfloat16_rn
  }
  reinterpret_cast<uint4*>(p)[v] = bits.raw;
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void StoreOne(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void StoreOne(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

template <typename A, typename B, typename Out>
__global__ void AddVectorKernel(const A* a, const B* b, Out* out, int64_t n) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t vectors = n / kVector;
  for (int64_t v = first; v < vectors; v += int64_t(gridDim.x) * blockDim.x) {
    float x[kVector], y[kVector];
    Load8(a, v, x);
    Load8(b, v, y);
#pragma unroll
    for (int k = 0; k < kVector; ++k) x[k] = x[k] + y[k];
    Store8(out, v, x);
  }
  const int64_t i = vectors * kVector + first;  // the n % 8 tail
  if (i < n) StoreOne(out, i, ToFloat(a[i]) + ToFloat(b[i]));
}

template <typename In, typename Out>
__global__ void CastVectorKernel(const In* in, Out* out, int64_t n) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t vectors = n / kVector;
  for (int64_t v = first; v < vectors; v += int64_t(gridDim.x) * blockDim.x) {
    float x[kVector];
    Load8(in, v, x);
    Store8(out, v, x);
  }
  const int64_t i = vectors * kVector + first;  // the n % 8 tail
  if (i < n) StoreOne(out, i, ToFloat(in[i]));
}

bool IsAligned(const TensorDesc& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

// Calls f with a null pointer of t's element type (fp32 or bf16).
template <typename F>
void WithElementType(const TensorDesc& t, F&& f) {
  if (t.dtype == DType::kFloat32) {
    f(static_cast<float*>(nullptr));
  } else {
    f(static_cast<__nv_bfloat16*>(nullptr));
  }
}

// Fast-path grid: at least one block, for a tail without whole vectors.
int VectorBlocks(int64_t n) { return BlocksFor(n / kVector, 256); }

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchAdd(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out,
                       cudaStream_t stream) {
  const int64_t n = out.NumElements();
  if (n == 0) return absl::OkStatus();
  if (IsAligned(a) && IsAligned(b) && IsAligned(out)) {
    WithElementType(a, [&](auto* a_type) {
      WithElementType(b, [&](auto* b_type) {
        WithElementType(out, [&](auto* out_type) {
          using A = std::remove_pointer_t<decltype(a_type)>;
          using B = std::remove_pointer_t<decltype(b_type)>;
          using Out = std::remove_pointer_t<decltype(out_type)>;
          AddVectorKernel<<<VectorBlocks(n), 256, 0, stream>>>(static_cast<const A*>(a.data),
                                                               static_cast<const B*>(b.data),
                                                               static_cast<Out*>(out.data), n);
        });
      });
    });
  } else {
    AddKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(a.data, int(a.dtype), b.data, int(b.dtype),
                                                     out.data, int(out.dtype), n);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchCast(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream) {
  const int64_t n = out.NumElements();
  if (n == 0) return absl::OkStatus();
  if (IsAligned(in) && IsAligned(out)) {
    WithElementType(in, [&](auto* in_type) {
      WithElementType(out, [&](auto* out_type) {
        using In = std::remove_pointer_t<decltype(in_type)>;
        using Out = std::remove_pointer_t<decltype(out_type)>;
        CastVectorKernel<<<VectorBlocks(n), 256, 0, stream>>>(static_cast<const In*>(in.data),
                                                              static_cast<Out*>(out.data), n);
      });
    });
  } else {
    CastKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(in.data, int(in.dtype), out.data,
                                                      int(out.dtype), n);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

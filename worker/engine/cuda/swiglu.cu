// SwiGLU on the GPU with the CPU reference's formulas: gate_up [T, 2F] bf16
// (gate in [0, F), up in [F, 2F)); out = silu(g) * u; backward
// d_g = dy * u * s (1 + g (1 - s)), d_u = dy * silu(g), s = sigmoid(g).
//
// Both directions are memory-bound. The fast path (every tensor bf16, F a
// multiple of 8, pointers 16-byte aligned) gives each thread 8 columns of
// one row as 16-byte vectors on a 2-D grid (x along the row, y over rows),
// so there is no index division. Other cases take the general kernels,
// one element per thread with dtype-dispatched loads. Both paths evaluate
// the same fp32 expressions (SiluTimes, SwiGluGrads) and round once.
//
// Determinism: no reductions; each output element depends on its inputs
// only.

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/swiglu_math.cuh"

namespace tessera {
namespace cuda {
namespace {

// Columns per fast-path thread: one 16-byte vector of bf16.
constexpr int kSwiGluVector = 8;
// Fast-path block: a warp along a row, kSwiGluRowsPerBlock rows.
constexpr int kSwiGluRowsPerBlock = 8;

// ---- kernels ---------------------------------------------------------------

__global__ void SwiGluForwardKernel(const void* gu, int dgu, void* out, int dout, int64_t t,
                                    int64_t f) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < t * f;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / f, j = idx % f;
    const float g = LoadF(gu, dgu, row * 2 * f + j), u = LoadF(gu, dgu, row * 2 * f + f + j);
    StoreF(out, dout, idx, SiluTimes(g, u));
  }
}

__global__ void SwiGluBackwardKernel(const void* dy, int ddy, const void* gu, int dgu,
                                     void* dgu_out, int dout, int64_t t, int64_t f) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < t * f;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / f, j = idx % f;
    const float g = LoadF(gu, dgu, row * 2 * f + j), u = LoadF(gu, dgu, row * 2 * f + f + j);
    const float d = LoadF(dy, ddy, idx);
    float d_g, d_u;
    SwiGluGrads(d, g, u, &d_g, &d_u);
    StoreF(dgu_out, dout, row * 2 * f + j, d_g);
    StoreF(dgu_out, dout, row * 2 * f + f + j, d_u);
  }
}

// Fast path: the thread's columns are [j, j + 8) of rows threadIdx.y +
// k * blockDim.y * gridDim.y (gridDim.y is capped at 65535).
__global__ void SwiGluForwardVectorKernel(const __nv_bfloat16* gu, __nv_bfloat16* out, int64_t t,
                                          int64_t f) {
  const int64_t j = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * kSwiGluVector;
  if (j >= f) return;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < t;
       row += int64_t(gridDim.y) * blockDim.y) {
    const __nv_bfloat16* gate = gu + row * 2 * f + j;
    Bf16x8 g8, u8, y8;
    g8.raw = *reinterpret_cast<const uint4*>(gate);
    u8.raw = *reinterpret_cast<const uint4*>(gate + f);
#pragma unroll
    for (int p = 0; p < kSwiGluVector / 2; ++p) {
      const float2 g = __bfloat1622float2(g8.pair[p]), u = __bfloat1622float2(u8.pair[p]);
      y8.pair[p] = __floats2bfloat162_rn(SiluTimes(g.x, u.x), SiluTimes(g.y, u.y));  // RNE
    }
    *reinterpret_cast<uint4*>(out + row * f + j) = y8.raw;
  }
}

__global__ void SwiGluBackwardVectorKernel(const __nv_bfloat16* dy, const __nv_bfloat16* gu,
                                           __nv_bfloat16* dgu_out, int64_t t, int64_t f) {
  const int64_t j = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * kSwiGluVector;
  if (j >= f) return;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < t;
       row += int64_t(gridDim.y) * blockDim.y) {
    const int64_t gate = row * 2 * f + j;
    Bf16x8 g8, u8, d8, dg8, du8;
    g8.raw = *reinterpret_cast<const uint4*>(gu + gate);
    u8.raw = *reinterpret_cast<const uint4*>(gu + gate + f);
    d8.raw = *reinterpret_cast<const uint4*>(dy + row * f + j);
#pragma unroll
    for (int p = 0; p < kSwiGluVector / 2; ++p) {
      const float2 g = __bfloat1622float2(g8.pair[p]), u = __bfloat1622float2(u8.pair[p]);
      const float2 d = __bfloat1622float2(d8.pair[p]);
      float2 d_g, d_u;
      SwiGluGrads(d.x, g.x, u.x, &d_g.x, &d_u.x);
      SwiGluGrads(d.y, g.y, u.y, &d_g.y, &d_u.y);
      dg8.pair[p] = __floats2bfloat162_rn(d_g.x, d_g.y);  // RNE
      du8.pair[p] = __floats2bfloat162_rn(d_u.x, d_u.y);
    }
    *reinterpret_cast<uint4*>(dgu_out + gate) = dg8.raw;
    *reinterpret_cast<uint4*>(dgu_out + gate + f) = du8.raw;
  }
}

bool IsBf16Aligned(const TensorDesc& t) {
  return t.dtype == DType::kBFloat16 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

// The fast path's grid: x along the F / 8 vectors of a row, y over rows.
dim3 VectorBlock() { return dim3(32, kSwiGluRowsPerBlock); }
dim3 VectorGrid(int64_t t, int64_t f) {
  const int64_t x = (f / kSwiGluVector + 31) / 32;
  const int64_t y = (t + kSwiGluRowsPerBlock - 1) / kSwiGluRowsPerBlock;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(std::min<int64_t>(y, 65535)));
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchSwiGluForward(const TensorDesc& gate_up, const TensorDesc& out,
                                 cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (t * f == 0) return absl::OkStatus();
  if (f % kSwiGluVector == 0 && IsBf16Aligned(gate_up) && IsBf16Aligned(out)) {
    SwiGluForwardVectorKernel<<<VectorGrid(t, f), VectorBlock(), 0, stream>>>(
        static_cast<const __nv_bfloat16*>(gate_up.data), static_cast<__nv_bfloat16*>(out.data), t,
        f);
  } else {
    SwiGluForwardKernel<<<BlocksFor(t * f, 256), 256, 0, stream>>>(gate_up.data, int(gate_up.dtype),
                                                                   out.data, int(out.dtype), t, f);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchSwiGluBackward(const TensorDesc& dy, const TensorDesc& gate_up,
                                  const TensorDesc& dgu, cudaStream_t stream) {
  const int64_t t = gate_up.shape[0], f = gate_up.shape[1] / 2;
  if (t * f == 0) return absl::OkStatus();
  if (f % kSwiGluVector == 0 && IsBf16Aligned(dy) && IsBf16Aligned(gate_up) && IsBf16Aligned(dgu)) {
    SwiGluBackwardVectorKernel<<<VectorGrid(t, f), VectorBlock(), 0, stream>>>(
        static_cast<const __nv_bfloat16*>(dy.data), static_cast<const __nv_bfloat16*>(gate_up.data),
        static_cast<__nv_bfloat16*>(dgu.data), t, f);
  } else {
    SwiGluBackwardKernel<<<BlocksFor(t * f, 256), 256, 0, stream>>>(
        dy.data, int(dy.dtype), gate_up.data, int(gate_up.dtype), dgu.data, int(dgu.dtype), t, f);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

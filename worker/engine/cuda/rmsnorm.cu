// RMSNorm on the GPU with the CPU reference's formulas (rstd =
// 1/sqrtf(mean(x^2) + eps), fp32 arithmetic, one rounding to the output
// dtype). The op is memory-bound, so the kernels are shaped by their loads:
//
//  * Fast path (fp32/bf16 tensors, H a multiple of 8 and at most 8192,
//    16-byte aligned pointers): a group of 32..256 threads per row holds the
//    row in registers as 8-element vectors (16-byte loads and stores), so x
//    (forward) and dy, x (backward) are read from memory once. Each backward
//    block also sums dy * x * rstd over its rows into one grad_weight
//    partial, so grad_weight costs no second pass over dy and x.
//  * General path (any other shape, dtype or alignment): one block of 256
//    threads per row with scalar loads, and a separate partial-sum kernel.
//
// Both paths are deterministic: every sum (a row's sum of squares, a row's
// dot product, grad_weight's column sums) runs in an order fixed by the
// shape. grad_weight is summed without atomics in two levels: partials over
// runs of rows, then a fixed-order tree over the partials of each column,
// added into grad_weight.
//
// The fast path's per-row pieces (row group shape, loads, the row's sum of
// squares, the normalisation) come from rmsnorm_row.cuh, which the FP8
// RMSNorm (rmsnorm_quantize.cu) shares so that both give the same bits.

#include <cstdint>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/rmsnorm_row.cuh"

namespace tessera {
namespace cuda {
namespace {

// Both paths run blocks of the fast path's size (rmsnorm_row.cuh).
constexpr int kBlockThreads = kRowBlockThreads;
constexpr int kVecWidth = kRowVecWidth;
// grad_weight partials: at most kMaxPartials, each the sum over a power of
// two (>= 8) rows, so a backward launch has enough blocks to fill the GPU
// and the partials stay small (2 MiB for H = 1024).
constexpr int64_t kMaxPartials = 512;
static_assert(kMaxPartials <= 65535, "the general path puts the partials on grid.y");
// Reduce kernel: a block sums kReduceColumns columns over all partials,
// kReduceSlices threads per column.
constexpr int kReduceColumns = 32;
constexpr int kReduceSlices = 32;

// ---- kernels ---------------------------------------------------------------

// Fast path, one row per group of kRowThreads threads; x is read once.
template <int kRowThreads, int kVecs>
__global__ void __launch_bounds__(kBlockThreads)
    RmsNormForwardInRegistersKernel(const void* x, int dx, const void* w, int dw, float eps,
                                    void* out, int dout, float* rstd, int64_t t, int64_t h) {
  __shared__ float warp_sums[kBlockThreads / 32];
  const int lane = threadIdx.x % kRowThreads;
  const int64_t row =
      int64_t{blockIdx.x} * (kBlockThreads / kRowThreads) + threadIdx.x / kRowThreads;
  const bool live = row < t;  // dead groups still join the block's syncs
  float xv[kVecs][kVecWidth];
  LoadRowVecs<kRowThreads, kVecs>(x, dx, row, h, lane, live, xv);
  const float ss = RowGroupSum<kRowThreads>(SumOfSquares<kRowThreads, kVecs>(xv, h, lane, live),
                                            warp_sums);
  const float r = RowRstd(ss, h, eps);
  if (live && lane == 0) rstd[row] = r;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t c = VecColumn<kRowThreads>(k, lane);
    if (live && c < h) {
      float wv[kVecWidth], o[kVecWidth];
      Load8(w, dw, c, wv);
      Normalize8(xv[k], r, wv, o);
      Store8(out, dout, row * h + c, o);
    }
  }
}

// Fast path backward for the rows_per_partial rows (a power of two, >= 8)
// starting at block * rows_per_partial: grad_x per row (dy and x read once,
// held in registers), and partials[block, j] = sum over those rows of
// dy * x * rstd (each thread sums its columns over its group's rows in row
// order, then the groups are added in group order).
template <int kRowThreads, int kVecs>
__global__ void __launch_bounds__(kBlockThreads)
    RmsNormBackwardInRegistersKernel(const void* dy, int ddy, const void* x, int dx_t,
                                     const void* w, int dw_t, const float* rstd, void* dx,
                                     int ddx, int accumulate, float* partials,
                                     int rows_per_partial, int64_t t, int64_t h) {
  constexpr int kGroups = kBlockThreads / kRowThreads;  // <= 8: divides rows_per_partial
  __shared__ float warp_sums[kBlockThreads / 32];
  extern __shared__ float group_partials[];  // [kGroups, h] when kGroups > 1
  const int lane = threadIdx.x % kRowThreads, group = threadIdx.x / kRowThreads;
  float acc[kVecs][kVecWidth] = {};
  for (int i = group; i < rows_per_partial; i += kGroups) {
    const int64_t row = int64_t{blockIdx.x} * rows_per_partial + i;
    const bool live = row < t;  // dead groups still join the block's syncs
    const float r = live ? rstd[row] : 0.f;
    float g[kVecs][kVecWidth], xv[kVecs][kVecWidth];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int64_t c = VecColumn<kRowThreads>(k, lane);
      if (live && c < h) {
        float wv[kVecWidth];
        Load8(dy, ddy, row * h + c, g[k]);
        Load8(x, dx_t, row * h + c, xv[k]);
        Load8(w, dw_t, c, wv);
#pragma unroll
        for (int e = 0; e < kVecWidth; ++e) {
          dot += wv[e] * g[k][e] * xv[k][e];
          acc[k][e] += g[k][e] * xv[k][e] * r;
        }
      }
    }
    dot = RowGroupSum<kRowThreads>(dot, warp_sums);
    const float coef = r * r * r / static_cast<float>(h) * dot;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int64_t c = VecColumn<kRowThreads>(k, lane);
      if (live && c < h) {
        float wv[kVecWidth], old[kVecWidth], o[kVecWidth];
        Load8(w, dw_t, c, wv);
        if (accumulate) Load8(dx, ddx, row * h + c, old);
#pragma unroll
        for (int e = 0; e < kVecWidth; ++e) {
          o[e] = r * wv[e] * g[k][e] - xv[k][e] * coef;
          if (accumulate) o[e] += old[e];
        }
        Store8(dx, ddx, row * h + c, o);
      }
    }
  }
  float* partial = partials + int64_t{blockIdx.x} * h;
  float* own = kGroups == 1 ? partial : group_partials + int64_t{group} * h;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t c = VecColumn<kRowThreads>(k, lane);
    if (c < h) Store8(own, static_cast<int>(DType::kFloat32), c, acc[k]);
  }
  if constexpr (kGroups > 1) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < h; j += kBlockThreads) {
      float s = 0.f;
      for (int gi = 0; gi < kGroups; ++gi) s += group_partials[gi * h + j];
      partial[j] = s;
    }
  }
}

__global__ void RmsNormForwardKernel(const void* x, int dx, const void* w, int dw, float eps,
                                     void* out, int dout, float* rstd, int64_t h) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = LoadF(x, dx, t * h + j);
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(h) + eps);  // as the CPU: IEEE sqrt, then divide
  if (threadIdx.x == 0) rstd[t] = r;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    StoreF(out, dout, t * h + j, LoadF(x, dx, t * h + j) * r * LoadF(w, dw, j));
  }
}

__global__ void RmsNormBackwardKernel(const void* dy, int ddy, const void* x, int dx_t,
                                      const void* w, int dw_t, const float* rstd, void* dx,
                                      int ddx, int accumulate, int64_t h) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float r = rstd[t];
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = LoadF(dy, ddy, t * h + j), xv = LoadF(x, dx_t, t * h + j);
    dot += LoadF(w, dw_t, j) * g * xv;
  }
  dot = BlockSum(dot, scratch);
  const float coef = r * r * r / static_cast<float>(h) * dot;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float v = r * LoadF(w, dw_t, j) * LoadF(dy, ddy, t * h + j) - LoadF(x, dx_t, t * h + j) * coef;
    if (accumulate) v += LoadF(dx, ddx, t * h + j);
    StoreF(dx, ddx, t * h + j, v);
  }
}

// General path: partials[p, j] = sum over rows [p, p + 1) * rows_per_partial
// of dy * x * rstd.
__global__ void RmsNormWeightGradPartialKernel(const void* dy, int ddy, const void* x, int dx_t,
                                               const float* rstd, float* partials,
                                               int rows_per_partial, int64_t t, int64_t h) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  const int64_t row0 = int64_t(blockIdx.y) * rows_per_partial;
  const int64_t row_end = min(row0 + rows_per_partial, t);
  float acc = 0.f;
  for (int64_t row = row0; row < row_end; ++row) {
    acc += LoadF(dy, ddy, row * h + j) * LoadF(x, dx_t, row * h + j) * rstd[row];
  }
  partials[blockIdx.y * h + j] = acc;
}

// dw[j] += sum over p of partials[p, j]. Block (kReduceColumns,
// kReduceSlices): slice s sums partials s, s + kReduceSlices, ... in order,
// then a fixed tree adds the slices, so the result is the same every run.
__global__ void __launch_bounds__(kReduceColumns * kReduceSlices)
    RmsNormWeightGradReduceKernel(const float* partials, int64_t num_partials, int64_t h,
                                  float* dw) {
  __shared__ float slice_sums[kReduceSlices][kReduceColumns];
  const int64_t j = int64_t{blockIdx.x} * kReduceColumns + threadIdx.x;
  float acc = 0.f;
  if (j < h) {
#pragma unroll 8
    for (int64_t p = threadIdx.y; p < num_partials; p += kReduceSlices) {
      acc += partials[p * h + j];
    }
  }
  const int x = threadIdx.x, y = threadIdx.y;
  slice_sums[y][x] = acc;
  __syncthreads();
  for (int half = kReduceSlices / 2; half > 0; half /= 2) {
    if (y < half) slice_sums[y][x] += slice_sums[y + half][x];
    __syncthreads();
  }
  if (y == 0 && j < h) dw[j] += slice_sums[0][x];
}

bool Is16ByteAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows per grad_weight partial: the smallest power of two >= 8 that keeps
// the partials at most kMaxPartials.
int RowsPerPartial(int64_t tokens) {
  int64_t rows = 8;
  while ((tokens + rows - 1) / rows > kMaxPartials) rows *= 2;
  return static_cast<int>(rows);
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchRmsNormForward(const TensorDesc& x, const TensorDesc& w, float eps,
                                  const TensorDesc& out, const TensorDesc& rstd,
                                  cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  if (t == 0) return absl::OkStatus();
  float* r = static_cast<float*>(rstd.data);
  if (RowsFitRegisters(h, {&x, &w, &out})) {
    WithRowShape(h, [&](auto threads, auto vecs) {
      constexpr int kRowsPerBlock = kBlockThreads / threads();
      const unsigned blocks = static_cast<unsigned>((t + kRowsPerBlock - 1) / kRowsPerBlock);
      RmsNormForwardInRegistersKernel<threads(), vecs()><<<blocks, kBlockThreads, 0, stream>>>(
          x.data, int(x.dtype), w.data, int(w.dtype), eps, out.data, int(out.dtype), r, t, h);
    });
  } else {
    RmsNormForwardKernel<<<static_cast<unsigned>(t), kBlockThreads, 0, stream>>>(
        x.data, int(x.dtype), w.data, int(w.dtype), eps, out.data, int(out.dtype), r, h);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

int64_t RmsNormWeightGradScratchFloats(int64_t tokens, int64_t h) {
  const int rows = RowsPerPartial(tokens);
  return (tokens + rows - 1) / rows * h;
}

absl::Status LaunchRmsNormBackward(const TensorDesc& dy, const TensorDesc& x, const TensorDesc& w,
                                   const TensorDesc& rstd, const TensorDesc& dx, bool accumulate,
                                   const TensorDesc& dw, float* scratch, cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  if (t == 0 || h == 0) return absl::OkStatus();
  const float* r = static_cast<const float*>(rstd.data);
  const int rows_per_partial = RowsPerPartial(t);
  const unsigned partials = static_cast<unsigned>((t + rows_per_partial - 1) / rows_per_partial);
  if (RowsFitRegisters(h, {&dy, &x, &w, &dx}) && Is16ByteAligned(scratch)) {
    WithRowShape(h, [&](auto threads, auto vecs) {
      constexpr int kGroups = kBlockThreads / threads();
      const size_t smem = kGroups > 1 ? kGroups * h * sizeof(float) : 0;  // <= 32 KiB
      RmsNormBackwardInRegistersKernel<threads(), vecs()>
          <<<partials, kBlockThreads, smem, stream>>>(
              dy.data, int(dy.dtype), x.data, int(x.dtype), w.data, int(w.dtype), r, dx.data,
              int(dx.dtype), accumulate ? 1 : 0, scratch, rows_per_partial, t, h);
    });
    CUDA_RETURN_IF_LAUNCH_FAILED();
  } else {
    RmsNormBackwardKernel<<<static_cast<unsigned>(t), kBlockThreads, 0, stream>>>(
        dy.data, int(dy.dtype), x.data, int(x.dtype), w.data, int(w.dtype), r, dx.data,
        int(dx.dtype), accumulate ? 1 : 0, h);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    const unsigned column_blocks = static_cast<unsigned>((h + kBlockThreads - 1) / kBlockThreads);
    RmsNormWeightGradPartialKernel<<<dim3(column_blocks, partials), kBlockThreads, 0, stream>>>(
        dy.data, int(dy.dtype), x.data, int(x.dtype), r, scratch, rows_per_partial, t, h);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  const unsigned reduce_blocks = static_cast<unsigned>((h + kReduceColumns - 1) / kReduceColumns);
  RmsNormWeightGradReduceKernel<<<reduce_blocks, dim3(kReduceColumns, kReduceSlices), 0, stream>>>(
      scratch, partials, h, static_cast<float*>(dw.data));
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

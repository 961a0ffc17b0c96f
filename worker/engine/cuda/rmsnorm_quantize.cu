// RMSNorm that writes FP8 directly, for the FP8 QKV and gate/up projections'
// input: RmsNormForward into a bf16 [T, H] tensor followed by
// QuantizeTranspose of that tensor into out [T, H] and out_t [H, T], bit for
// bit, in one pass. The bf16 tensor never goes to memory, which saves
// writing and re-reading 2 * T * H bytes per norm.
//
// Same bits as the two ops: a row is normalised exactly as RmsNormForward's
// register fast path does it (rmsnorm_row.cuh: the same row group shape, the
// same order of the sum of squares, so the same rstd), each value is rounded
// to bf16 as the bf16 output would store it, and that bf16 value is what is
// encoded and max-combined into amax, with the cast-transpose's encoder and
// block amax (fp8_cast_transpose.cuh).
//
// Block shape: 256 threads own kRowsPerBlock = 32 whole rows. Row groups as
// in RmsNormForward (32..256 threads per row) take the rows a few at a time
// per group, their 16-byte loads in flight together (for fp32 x, 2 rows at
// a time, the next 2 loading while these are reduced and encoded). Each
// row's codes go to `out` (8-byte stores, coalesced along the row) and to a
// shared-memory stage. Then the block writes out_t [H, T] from the stage:
// 32 rows make each column's run 32 bytes, a full sector, written by 8
// threads with 4-byte stores. The stage holds 32 x (H + 4) bytes (the 4
// spare bytes per row keep the transposing reads free of bank conflicts),
// at most 128 KiB for H = 4096.
//
// The fused kernel needs x and weight fp32 or bf16 and 16-byte aligned, H a
// multiple of 8 and at most 4096, T a positive multiple of 32, out 8-byte
// and out_t 4-byte aligned. Other shapes return false from the launcher and
// CudaOps runs RmsNormForward and QuantizeTranspose through a scratch.
//
// Determinism: a row's sum of squares runs in the order rmsnorm_row.cuh
// fixes; blocks combine only amax, by an atomic maximum (order-free).

#include <cuda_bf16.h>

#include <cstdint>
#include <limits>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/fp8_cast_transpose.cuh"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/rmsnorm_row.cuh"

namespace tessera {
namespace cuda {
namespace {

constexpr int kRowsPerBlock = 32;
// The widest row the stage takes (256 threads of 2 vectors).
constexpr int64_t kMaxFusedRowWidth = 4096;
// Rows each row group holds in registers at once. fp32 x: 2, with the next
// 2 rows' loads in flight meanwhile (prefetched); bf16 x: 4, not prefetched.
// Those measured fastest on H200 at H = 1024, 2048 and 4096 of the choices
// tried (2, 4 or 8 rows, with and without the prefetch, with and without a
// 64-register cap): for bf16's half-size loads the prefetch's registers
// cost more occupancy than they win.
constexpr int kFp32Rows = 2;
constexpr int kBf16Rows = 4;
// Phase 2: thread (i, j) turns a 4 x 4 byte block around; 8 j's cover the
// 32 staged rows, 32 i's cover 128 columns per step.
constexpr int kColumnsPerStep = kRowBlockThreads / (kRowsPerBlock / 4) * 4;

static_assert(kRowBlockThreads == kCastTransposeThreads,
              "FinishCastTransposeBlock reduces over a cast-transpose block");

// Bytes per staged row: h is a multiple of 8, so h + 4 is an odd number of
// 4-byte words.
__host__ __device__ constexpr int64_t StageStride(int64_t h) { return h + 4; }

// ---- kernels ---------------------------------------------------------------

// Row b of a pass, for a group: the pass's rows are interleaved over the
// groups, kGroups apart.
template <int kRowThreads, int kRowsAtOnce>
__device__ __forceinline__ int PassRow(int pass, int b) {
  constexpr int kGroups = kRowBlockThreads / kRowThreads;
  return (pass * kRowsAtOnce + b) * kGroups + static_cast<int>(threadIdx.x) / kRowThreads;
}

// This thread's vectors of the rows it holds in pass `pass`.
template <int kRowThreads, int kVecs, int kRowsAtOnce>
__device__ __forceinline__ void LoadPass(const void* x, int dx, int64_t row0, int pass, int64_t h,
                                         int lane, float (&xv)[kRowsAtOnce][kVecs][kRowVecWidth]) {
#pragma unroll
  for (int b = 0; b < kRowsAtOnce; ++b) {
    const int64_t row = row0 + PassRow<kRowThreads, kRowsAtOnce>(pass, b);
    LoadRowVecs<kRowThreads, kVecs>(x, dx, row, h, lane, true, xv[b]);
  }
}

// With one vector per thread per row (H <= 2048) at most 64 registers, so
// that 4 blocks fit an SM wherever their stages do (H <= 1024): 1.4x faster
// for bf16 x at H = 1024 than without the cap, the same for fp32.
template <int kRowThreads, int kVecs, int kRowsAtOnce, bool kPrefetch, bool kE5M2>
__global__ void __launch_bounds__(kRowBlockThreads, kVecs == 1 ? 4 : 1)
    RmsNormQuantizeKernel(const void* x, int dx, const void* w, int dw, float eps, float* rstd,
                          uint8_t* out, uint8_t* out_t, int64_t t, int64_t h, const float* scale,
                          float* scale_inv, float* out_t_scale_inv, float* amax) {
  constexpr int kGroups = kRowBlockThreads / kRowThreads;
  constexpr int kPasses = kRowsPerBlock / (kGroups * kRowsAtOnce);
  static_assert(kPasses >= 1 && kRowsPerBlock % (kGroups * kRowsAtOnce) == 0, "rows split evenly");
  __shared__ float warp_sums[kRowsAtOnce * kRowBlockThreads / 32];
  extern __shared__ __align__(16) uint8_t stage[];  // [kRowsPerBlock, StageStride(h)]
  const int64_t stride = StageStride(h);
  const int lane = threadIdx.x % kRowThreads;
  const int64_t row0 = int64_t{blockIdx.x} * kRowsPerBlock;
  const float s = *scale;
  float wv[kVecs][kRowVecWidth];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t c = VecColumn<kRowThreads>(k, lane);
    if (c < h) Load8(w, dw, c, wv[k]);
  }
  float local = 0.f;  // this thread's amax
  // With kPrefetch, the next pass's rows load into `next` while this pass's
  // rows are reduced and encoded.
  float xv[kRowsAtOnce][kVecs][kRowVecWidth], next[kRowsAtOnce][kVecs][kRowVecWidth];
  if constexpr (kPrefetch) LoadPass<kRowThreads, kVecs, kRowsAtOnce>(x, dx, row0, 0, h, lane, xv);
#pragma unroll 1
  for (int pass = 0; pass < kPasses; ++pass) {
    if constexpr (!kPrefetch) {
      LoadPass<kRowThreads, kVecs, kRowsAtOnce>(x, dx, row0, pass, h, lane, xv);
    }
    float ss[kRowsAtOnce];
#pragma unroll
    for (int b = 0; b < kRowsAtOnce; ++b) {
      ss[b] = SumOfSquares<kRowThreads, kVecs>(xv[b], h, lane, true);
    }
    if constexpr (kPrefetch) {
      if (pass + 1 < kPasses) {
        LoadPass<kRowThreads, kVecs, kRowsAtOnce>(x, dx, row0, pass + 1, h, lane, next);
      }
    }
    RowGroupSums<kRowThreads, kRowsAtOnce>(ss, warp_sums);
#pragma unroll
    for (int b = 0; b < kRowsAtOnce; ++b) {
      const int local_row = PassRow<kRowThreads, kRowsAtOnce>(pass, b);
      const int64_t row = row0 + local_row;
      const float r = RowRstd(ss[b], h, eps);
      if (lane == 0) rstd[row] = r;
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        const int64_t c = VecColumn<kRowThreads>(k, lane);
        if (c < h) {
          float v[kRowVecWidth];
          Normalize8ToBf16(xv[b][k], r, wv[k], v);
          EncodeSegment<kE5M2>(v, s, out != nullptr ? out + row * h + c : nullptr,
                               stage + local_row * stride + c, local);
        }
      }
    }
    if (kPrefetch && pass + 1 < kPasses) {
#pragma unroll
      for (int b = 0; b < kRowsAtOnce; ++b) {
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
#pragma unroll
          for (int e = 0; e < kRowVecWidth; ++e) xv[b][k][e] = next[b][k][e];
        }
      }
    }
  }
  __syncthreads();
  // out_t [h, t]: thread (i, j) reads staged rows 4j..4j+3 at columns c..c+3
  // (with the odd word stride the 32 lanes of a warp hit 32 banks) and writes
  // 4 bytes into each of out_t's rows c..c+3 at column row0 + 4j.
  const int j = threadIdx.x % (kRowsPerBlock / 4), i = threadIdx.x / (kRowsPerBlock / 4);
  for (int64_t c = 4 * i; c < h; c += kColumnsPerStep) {
    uint32_t rows[4], columns[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      rows[q] = *reinterpret_cast<const uint32_t*>(stage + (4 * j + q) * stride + c);
    }
    TransposeBytes4x4(rows, columns);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      *reinterpret_cast<uint32_t*>(out_t + (c + p) * t + row0 + 4 * j) = columns[p];
    }
  }
  FinishCastTransposeBlock(local, s, scale_inv, out_t_scale_inv, amax);
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether the fused kernel takes these tensors (see the top of the file).
bool FitsFusedKernel(const TensorDesc& x, const TensorDesc& w, const TensorDesc& out,
                     const TensorDesc& out_t) {
  const int64_t t = x.shape[0], h = x.shape[1];
  return RowsFitRegisters(h, {&x, &w}) && h <= kMaxFusedRowWidth && t > 0 &&
         t % kRowsPerBlock == 0 && t / kRowsPerBlock <= std::numeric_limits<int32_t>::max() &&
         Aligned(out.data, 8) && Aligned(out_t.data, 4);
}

template <int kRowThreads, int kVecs, int kRowsAtOnce, bool kPrefetch, bool kE5M2>
cudaError_t Launch(const TensorDesc& x, const TensorDesc& w, float eps, const TensorDesc& out,
                   const TensorDesc& out_t, const TensorDesc& rstd, cudaStream_t stream) {
  const int64_t t = x.shape[0], h = x.shape[1];
  const size_t stage_bytes = static_cast<size_t>(kRowsPerBlock * StageStride(h));
  auto* kernel = RmsNormQuantizeKernel<kRowThreads, kVecs, kRowsAtOnce, kPrefetch, kE5M2>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; the largest
  // carveout lets several blocks share an SM (3 for H = 2048).
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(stage_bytes));
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
  }
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(t / kRowsPerBlock), kRowBlockThreads, stage_bytes, stream>>>(
      x.data, static_cast<int>(x.dtype), w.data, static_cast<int>(w.dtype), eps,
      static_cast<float*>(rstd.data), static_cast<uint8_t*>(out.data),
      static_cast<uint8_t*>(out_t.data), t, h, out.scale, out.scale_inv, out_t.scale_inv, out.amax);
  return cudaGetLastError();
}

// Launch with the x-dependent pipelining (see kFp32Rows) and the FP8 format
// as template arguments.
template <int kRowThreads, int kVecs>
cudaError_t LaunchForRowShape(const TensorDesc& x, const TensorDesc& w, float eps,
                              const TensorDesc& out, const TensorDesc& out_t,
                              const TensorDesc& rstd, cudaStream_t stream) {
  const bool e5m2 = out.dtype == DType::kE5M2;
  if (x.dtype == DType::kBFloat16) {
    constexpr int kRows = kBf16Rows;
    return e5m2
               ? Launch<kRowThreads, kVecs, kRows, false, true>(x, w, eps, out, out_t, rstd, stream)
               : Launch<kRowThreads, kVecs, kRows, false, false>(x, w, eps, out, out_t, rstd,
                                                                 stream);
  }
  constexpr int kRows = kFp32Rows;
  return e5m2 ? Launch<kRowThreads, kVecs, kRows, true, true>(x, w, eps, out, out_t, rstd, stream)
              : Launch<kRowThreads, kVecs, kRows, true, false>(x, w, eps, out, out_t, rstd, stream);
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::StatusOr<bool> LaunchRmsNormForwardQuantize(const TensorDesc& x, const TensorDesc& w,
                                                  float eps, const TensorDesc& out,
                                                  const TensorDesc& out_t, const TensorDesc& rstd,
                                                  cudaStream_t stream) {
  if (!FitsFusedKernel(x, w, out, out_t)) return false;
  cudaError_t launch_error = cudaSuccess;
  WithRowShape(x.shape[1], [&](auto threads, auto vecs) {
    if constexpr (vecs() * kRowVecWidth * threads() <= kMaxFusedRowWidth) {
      launch_error = LaunchForRowShape<threads(), vecs()>(x, w, eps, out, out_t, rstd, stream);
    }
  });
  CUDA_RETURN_IF_ERROR(launch_error);
  return true;
}

}  // namespace cuda
}  // namespace tessera

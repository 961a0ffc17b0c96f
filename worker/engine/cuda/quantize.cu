// FP8 casts on the GPU: cast with fused amax, the cast that also writes the
// transposed copy, dequantize, amax, the 1/2/4-byte transpose, and the
// delayed/current scaling update over n tensors in one small kernel.
// Encoding is bit-identical to the CPU reference (fp8_device.cuh mirrors
// worker/engine/cpu/fp8.h: round to nearest even, satfinite, NaN -> 0x7F)
// and uses Hopper's two-wide converter.
//
// The cast-transpose runs on every FP8 linear's input and gradient, so it
// has a fast path for the shapes a model produces (both sides multiples of
// 64, 16-byte aligned rows): the 64 x 64 tiled kernel of
// fp8_cast_transpose.cuh, fed by 16-byte loads. Other shapes take a
// 32 x 32 tiled kernel here.
//
// Determinism: the encodings are elementwise. amax is the only value many
// blocks combine, through an integer atomicMax on the non-negative floats'
// bits: a maximum is the same in any order, so it too is bit-identical run
// to run. The scaling update is one small kernel with a fixed loop order.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_cast_transpose.cuh"
#include "worker/engine/cuda/fp8_device.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

// out[i] = encode(in[i] * scale); amax of |in| is block-reduced, then
// atomically max-combined into *amax.
__global__ void QuantizeKernel(const void* in, int in_dtype, uint8_t* out, int64_t n,
                               const float* scale, float* scale_inv, float* amax, int e5m2) {
  __shared__ float scratch[32];
  const float s = *scale;
  float local = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = LoadF(in, in_dtype, i);
    if (!isnan(v)) local = fmaxf(local, fabsf(v));
    out[i] = e5m2 ? EncodeE5M2(v * s) : EncodeE4M3(v * s);
  }
  local = BlockMax(local, scratch);
  if (threadIdx.x == 0) {
    if (amax != nullptr) AtomicMaxNonNegative(amax, local);
    if (scale_inv != nullptr && blockIdx.x == 0) *scale_inv = 1.0f / s;
  }
}

// The 2-D cast that also writes the transposed copy. A block of 32 x 8
// threads owns a 32 x 32 tile: it reads the tile row by row (coalesced),
// writes out (optional) the same way, stages the codes in shared memory,
// and writes out_t [cols, rows] row by row as well, so neither side of the
// transpose is strided in global memory.
constexpr int kTile = 32;
constexpr int kTileRows = 8;

__global__ void QuantizeTransposeKernel(const void* in, int in_dtype, uint8_t* out,
                                        uint8_t* out_t, int64_t rows, int64_t cols,
                                        const float* scale, float* scale_inv, float* amax,
                                        int e5m2) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  __shared__ float warp_max[kTileRows];
  const float s = *scale;
  const int64_t col0 = int64_t(blockIdx.x) * kTile, row0 = int64_t(blockIdx.y) * kTile;
  float local = 0.f;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t row = row0 + r, col = col0 + threadIdx.x;
    if (row < rows && col < cols) {
      const float v = LoadF(in, in_dtype, row * cols + col);
      if (!isnan(v)) local = fmaxf(local, fabsf(v));
      const uint8_t code = e5m2 ? EncodeE5M2(v * s) : EncodeE4M3(v * s);
      if (out != nullptr) out[row * cols + col] = code;
      tile[r][threadIdx.x] = code;
    }
  }
  __syncthreads();
  for (int c = threadIdx.y; c < kTile; c += kTileRows) {
    const int64_t out_row = col0 + c, out_col = row0 + threadIdx.x;  // out_t[col][row]
    if (out_row < cols && out_col < rows) out_t[out_row * rows + out_col] = tile[threadIdx.x][c];
  }
  local = WarpMax(local);  // each threadIdx.y is one warp
  if (threadIdx.x == 0) warp_max[threadIdx.y] = local;
  __syncthreads();
  if (threadIdx.y == 0 && threadIdx.x == 0) {
    float block = warp_max[0];
    for (int w = 1; w < kTileRows; ++w) block = fmaxf(block, warp_max[w]);
    if (amax != nullptr) AtomicMaxNonNegative(amax, block);
    if (scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0) *scale_inv = 1.0f / s;
  }
}

// The tiled cast-transpose's producer for a stored input: 8 values from
// one 16-byte (bf16) or two 16-byte (fp32) loads.
struct LoadBf16Rows {
  const __nv_bfloat16* in;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t col, float (&v)[8]) const {
    LoadBf16x8AsFloats(in + row * cols + col, v);
  }
};

struct LoadFp32Rows {
  const float* in;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t col, float (&v)[8]) const {
    const float4* p = reinterpret_cast<const float4*>(in + row * cols + col);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
};

__global__ void DequantizeKernel(const uint8_t* in, int e5m2, const float* scale_inv, void* out,
                                 int out_dtype, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = e5m2 ? DecodeE5M2(in[i]) : DecodeE4M3(in[i]);
    StoreF(out, out_dtype, i, v * *scale_inv);
  }
}

__global__ void AmaxKernel(const void* in, int dtype, int64_t n, float* amax) {
  __shared__ float scratch[32];
  float local = 0.f;
  ForEachElementVectorized(in, dtype, n, [&](const float v) {
    if (!isnan(v)) local = fmaxf(local, fabsf(v));
  });
  local = BlockMax(local, scratch);
  if (threadIdx.x == 0) AtomicMaxNonNegative(amax, local);
}

// Also copies the codes' scale_inv to the transposed copy (block 0, when
// both are set), which would otherwise be a launch of its own.
template <typename T>
__global__ void TransposeKernel(const T* in, T* out, int64_t rows, int64_t cols,
                                const float* in_scale_inv, float* out_scale_inv) {
  if (out_scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 &&
      threadIdx.y == 0) {
    *out_scale_inv = *in_scale_inv;
  }
  __shared__ T tile[32][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = blockIdx.y * 32 + k;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  const int64_t r_out = blockIdx.x * 32;  // output row block = input column block
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t oc = blockIdx.y * 32 + threadIdx.x;  // output column = input row
    const int64_t orow = r_out + k;
    if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][k];
  }
}

// An FP8 (or any byte) matrix in [rows, cols] -> out_t [cols, rows], one 64 x
// 64 tile per block: each thread loads one 16-byte row segment, then
// WriteTransposedTile. Used for the weights' transposed copies in the
// backward (Ops::Transpose of a 1-byte dtype). Block (0, 0) also copies the
// codes' scale_inv when both are set.
__global__ void __launch_bounds__(kCastTransposeThreads)
    ByteTransposeTiledKernel(const uint8_t* in, uint8_t* out_t, int64_t rows, int64_t cols,
                             const float* in_scale_inv, float* out_scale_inv) {
  constexpr int kTile = kCastTransposeTile, kStride = kCastTransposeTileStride;
  __shared__ __align__(16) uint8_t tile[kTile * kStride];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int r = threadIdx.x / 4, c = (threadIdx.x % 4) * 16;  // 4 segments per tile row
  const uint4 v = *reinterpret_cast<const uint4*>(in + (row0 + r) * cols + col0 + c);
  uint32_t* slot = reinterpret_cast<uint32_t*>(tile + r * kStride + c);
  slot[0] = v.x;
  slot[1] = v.y;
  slot[2] = v.z;
  slot[3] = v.w;
  if (out_scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *out_scale_inv = *in_scale_inv;
  }
  __syncthreads();
  WriteTransposedTile(tile, out_t, rows, row0, col0);
}

// *dst = *src, or 1 / *src when `invert` (from a scale rather than a scale_inv).
__global__ void CopyScaleInvKernel(const float* src, float* dst, int invert) {
  *dst = invert ? 1.0f / *src : *src;
}

__global__ void UpdateScalesKernel(float* amax, float* history, float* scale, float* scale_inv,
                                   int scale_inv_stride, int n, int history_len, float fp8_max,
                                   int margin, int use_max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int h = history_len - 1; h > 0; --h) history[h * n + i] = history[(h - 1) * n + i];
  history[i] = amax[i];
  amax[i] = 0.f;
  float a = history[i];
  if (use_max) {
    for (int h = 1; h < history_len; ++h) a = fmaxf(a, history[h * n + i]);
  }
  if (a > 0.f && isfinite(a)) {
    const float s = fp8_max / a / ldexpf(1.0f, margin);
    if (isfinite(s)) {
      scale[i] = s;
      scale_inv[static_cast<int64_t>(i) * scale_inv_stride] = 1.0f / s;
    }
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchQuantize(const TensorDesc& in, const TensorDesc& out, const TensorDesc* out_t,
                            cudaStream_t stream) {
  const int64_t n = in.NumElements();
  if (n == 0 && out.scale_inv != nullptr) {  // no block runs: still publish 1 / scale
    CopyScaleInvKernel<<<1, 1, 0, stream>>>(out.scale, out.scale_inv, 1);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  if (out_t == nullptr) {
    if (n == 0) return absl::OkStatus();
    QuantizeKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(
        in.data, static_cast<int>(in.dtype), static_cast<uint8_t*>(out.data), n, out.scale,
        out.scale_inv, out.amax, out.dtype == DType::kE5M2);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    return absl::OkStatus();
  }
  if ((in.dtype == DType::kBFloat16 || in.dtype == DType::kFloat32) &&
      reinterpret_cast<uintptr_t>(in.data) % 16 == 0 &&
      FitsCastTransposeTiles(in.shape[0], in.shape[1], out, *out_t)) {
    const int64_t rows = in.shape[0], cols = in.shape[1];
    if (in.dtype == DType::kBFloat16) {
      CUDA_RETURN_IF_ERROR(LaunchCastTransposeTiled(
          LoadBf16Rows{static_cast<const __nv_bfloat16*>(in.data), cols}, rows, cols, out, *out_t,
          stream));
    } else {
      CUDA_RETURN_IF_ERROR(LaunchCastTransposeTiled(
          LoadFp32Rows{static_cast<const float*>(in.data), cols}, rows, cols, out, *out_t, stream));
    }
    return absl::OkStatus();
  }
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  if (row_tiles > 65535 || col_tiles > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("in: ", rows, " x ", cols, " is too large for one QuantizeTranspose"));
  }
  if (n > 0) {
    dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
    QuantizeTransposeKernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        in.data, static_cast<int>(in.dtype), static_cast<uint8_t*>(out.data),
        static_cast<uint8_t*>(out_t->data), rows, cols, out.scale, out.scale_inv, out.amax,
        out.dtype == DType::kE5M2);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  if (out_t->scale_inv != nullptr) {
    // out_t shares out's scale: its scale_inv is 1 / *out.scale as well.
    CopyScaleInvKernel<<<1, 1, 0, stream>>>(out.scale, out_t->scale_inv, 1);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return absl::OkStatus();
}

absl::Status LaunchDequantize(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream) {
  const int64_t n = in.NumElements();
  if (n == 0) return absl::OkStatus();
  DequantizeKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(
      static_cast<const uint8_t*>(in.data), in.dtype == DType::kE5M2, in.scale_inv, out.data,
      static_cast<int>(out.dtype), n);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchAmax(const TensorDesc& in, float* amax, cudaStream_t stream) {
  const int64_t n = in.NumElements();
  if (n == 0) return absl::OkStatus();
  // A grid-stride loop over at most 2048 blocks (16 per SM of 132): one
  // atomic per block, so a large tensor does not queue half a million on
  // one address. A maximum does not depend on the order it is taken in.
  constexpr int kMaxAmaxBlocks = 2048;
  AmaxKernel<<<std::min(BlocksFor(n, 256), kMaxAmaxBlocks), 256, 0, stream>>>(
      in.data, static_cast<int>(in.dtype), n, amax);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchTranspose(const TensorDesc& in, const TensorDesc& out, cudaStream_t stream) {
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const bool copy_scale = in.scale_inv != nullptr && out.scale_inv != nullptr;
  if (rows == 0 || cols == 0) {
    if (copy_scale) {
      CopyScaleInvKernel<<<1, 1, 0, stream>>>(in.scale_inv, out.scale_inv, 0);
      CUDA_RETURN_IF_LAUNCH_FAILED();
    }
    return absl::OkStatus();
  }
  const float* src_scale_inv = copy_scale ? in.scale_inv : nullptr;
  float* dst_scale_inv = copy_scale ? out.scale_inv : nullptr;
  // FP8 weights in whole 64 x 64 tiles (every model shape we train) take the
  // tiled kernel: 16-byte loads, coalesced 4-byte stores.
  if (DTypeSize(in.dtype) == 1 && FitsCastTransposeTiles(rows, cols, in, out) &&
      reinterpret_cast<uintptr_t>(in.data) % 16 == 0) {
    const dim3 grid(static_cast<unsigned>(cols / kCastTransposeTile),
                    static_cast<unsigned>(rows / kCastTransposeTile));
    ByteTransposeTiledKernel<<<grid, kCastTransposeThreads, 0, stream>>>(
        static_cast<const uint8_t*>(in.data), static_cast<uint8_t*>(out.data), rows, cols,
        src_scale_inv, dst_scale_inv);
    CUDA_RETURN_IF_LAUNCH_FAILED();
    return absl::OkStatus();
  }
  dim3 block(32, 8);
  dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  switch (DTypeSize(in.dtype)) {
    case 1:
      TransposeKernel<uint8_t><<<grid, block, 0, stream>>>(
          static_cast<const uint8_t*>(in.data), static_cast<uint8_t*>(out.data), rows, cols,
          src_scale_inv, dst_scale_inv);
      break;
    case 2:
      TransposeKernel<uint16_t><<<grid, block, 0, stream>>>(
          static_cast<const uint16_t*>(in.data), static_cast<uint16_t*>(out.data), rows, cols,
          src_scale_inv, dst_scale_inv);
      break;
    default:
      TransposeKernel<uint32_t><<<grid, block, 0, stream>>>(
          static_cast<const uint32_t*>(in.data), static_cast<uint32_t*>(out.data), rows, cols,
          src_scale_inv, dst_scale_inv);
  }
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

absl::Status LaunchUpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                                   int scale_inv_stride, int n, int history_len, float fp8_max,
                                   int margin, AmaxAlgo algo, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  UpdateScalesKernel<<<(n + 127) / 128, 128, 0, stream>>>(amax, history, scale, scale_inv,
                                                          scale_inv_stride, n, history_len,
                                                          fp8_max, margin, algo == AmaxAlgo::kMax);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

// FP8 casts on the GPU: cast with fused amax, the cast that also writes the
// transposed copy, dequantize, amax, the 1/2/4-byte transpose, and the
// delayed/current scaling update over n tensors in one small kernel.
// Encoding is bit-identical to the CPU reference (fp8_device.cuh mirrors
// worker/engine/cpu/fp8.h: round to nearest even, satfinite, NaN -> 0x7F)
// and uses Hopper's two-wide converter.
//
// The cast-transpose runs on every FP8 linear's input and gradient, so it
// has a fast path for the shapes a model produces (both sides multiples of
// 64, 16-byte aligned rows): a block owns a 64 x 64 tile, reads it with
// 16-byte loads, writes `out` with 8-byte stores, and writes `out_t` from
// shared memory in 4 x 4 byte blocks transposed in registers, so both
// sides are coalesced. Other shapes take a 32 x 32 tiled kernel.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
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

// The fast path: 256 threads per 64 x 64 tile, T = float or __nv_bfloat16.
// Phase 1: each thread encodes two 8-element row segments and keeps their
// codes in `tile`. Phase 2: each thread turns a 4 x 4 byte block of the tile
// around and writes 4 bytes to each of 4 rows of out_t.
constexpr int kFastTile = 64;
constexpr int kFastThreads = 256;
constexpr int kFastTileStride = kFastTile + 4;  // bytes per tile row; 4 keeps words aligned

template <typename T>
__device__ __forceinline__ void LoadEight(const T* p, float (&v)[8]);

template <>
__device__ __forceinline__ void LoadEight<__nv_bfloat16>(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(words[k] << 16);
    v[2 * k + 1] = __uint_as_float(words[k] & 0xFFFF0000u);
  }
}

template <>
__device__ __forceinline__ void LoadEight<float>(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename T, bool kE5M2>
__global__ void __launch_bounds__(kFastThreads)
    QuantizeTransposeTiledKernel(const T* in, uint8_t* out, uint8_t* out_t, int64_t rows,
                                 int64_t cols, const float* scale, float* scale_inv,
                                 float* out_t_scale_inv, float* amax) {
  __shared__ __align__(16) uint8_t tile[kFastTile * kFastTileStride];
  __shared__ float warp_max[kFastThreads / 32];
  const float s = *scale;
  const int64_t row0 = int64_t(blockIdx.y) * kFastTile, col0 = int64_t(blockIdx.x) * kFastTile;
  float local = 0.f;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int segment = threadIdx.x + pass * kFastThreads;  // 8 segments of 8 per tile row
    const int r = segment / 8, c = (segment % 8) * 8;
    float v[8];
    LoadEight<T>(in + (row0 + r) * cols + col0 + c, v);
    for (int k = 0; k < 8; ++k) {
      if (!isnan(v[k])) local = fmaxf(local, fabsf(v[k]));
    }
    const uint32_t lo = EncodeFp8x4<kE5M2>(v[0] * s, v[1] * s, v[2] * s, v[3] * s);
    const uint32_t hi = EncodeFp8x4<kE5M2>(v[4] * s, v[5] * s, v[6] * s, v[7] * s);
    if (out != nullptr) {
      *reinterpret_cast<uint2*>(out + (row0 + r) * cols + col0 + c) = make_uint2(lo, hi);
    }
    uint32_t* slot = reinterpret_cast<uint32_t*>(tile + r * kFastTileStride + c);
    slot[0] = lo;
    slot[1] = hi;
  }
  __syncthreads();
  // Thread (i, j) owns tile rows 4j..4j+3 and columns 4i..4i+3; 16
  // consecutive lanes share i, so each out_t row gets 64 contiguous bytes.
  const int j = threadIdx.x % 16, i = threadIdx.x / 16;
  uint32_t w[4];
  for (int q = 0; q < 4; ++q) {
    w[q] = *reinterpret_cast<const uint32_t*>(tile + (4 * j + q) * kFastTileStride + 4 * i);
  }
  const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), lo23 = __byte_perm(w[2], w[3], 0x5140);
  const uint32_t hi01 = __byte_perm(w[0], w[1], 0x7362), hi23 = __byte_perm(w[2], w[3], 0x7362);
  const uint32_t column_codes[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                                    __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
  for (int p = 0; p < 4; ++p) {
    *reinterpret_cast<uint32_t*>(out_t + (col0 + 4 * i + p) * rows + row0 + 4 * j) = column_codes[p];
  }
  local = WarpMax(local);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    float block = warp_max[0];
    for (int k = 1; k < kFastThreads / 32; ++k) block = fmaxf(block, warp_max[k]);
    if (amax != nullptr) AtomicMaxNonNegative(amax, block);
    if (blockIdx.x == 0 && blockIdx.y == 0) {
      if (scale_inv != nullptr) *scale_inv = 1.0f / s;
      if (out_t_scale_inv != nullptr) *out_t_scale_inv = 1.0f / s;
    }
  }
}

bool TakesTiledPath(const TensorDesc& in, const TensorDesc& out, const TensorDesc& out_t) {
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return (in.dtype == DType::kBFloat16 || in.dtype == DType::kFloat32) && rows > 0 && cols > 0 &&
         rows % kFastTile == 0 && cols % kFastTile == 0 && rows / kFastTile <= 65535 &&
         aligned(in.data, 16) && aligned(out.data, 8) && aligned(out_t.data, 4);
}

template <typename T, bool kE5M2>
void LaunchTiled(const TensorDesc& in, const TensorDesc& out, const TensorDesc& out_t,
                 cudaStream_t stream) {
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const dim3 grid(static_cast<unsigned>(cols / kFastTile), static_cast<unsigned>(rows / kFastTile));
  QuantizeTransposeTiledKernel<T, kE5M2><<<grid, kFastThreads, 0, stream>>>(
      static_cast<const T*>(in.data), static_cast<uint8_t*>(out.data),
      static_cast<uint8_t*>(out_t.data), rows, cols, out.scale, out.scale_inv, out_t.scale_inv,
      out.amax);
}

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
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = LoadF(in, dtype, i);
    if (!isnan(v)) local = fmaxf(local, fabsf(v));
  }
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

// *dst = *src, or 1 / *src when `invert` (from a scale rather than a scale_inv).
__global__ void CopyScaleInvKernel(const float* src, float* dst, int invert) {
  *dst = invert ? 1.0f / *src : *src;
}

__global__ void UpdateScalesKernel(float* amax, float* history, float* scale, float* scale_inv,
                                   int n, int history_len, float fp8_max, int margin, int use_max) {
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
      scale_inv[i] = 1.0f / s;
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
  if (TakesTiledPath(in, out, *out_t)) {
    const bool bf16 = in.dtype == DType::kBFloat16, e5m2 = out.dtype == DType::kE5M2;
    if (bf16 && e5m2) LaunchTiled<__nv_bfloat16, true>(in, out, *out_t, stream);
    if (bf16 && !e5m2) LaunchTiled<__nv_bfloat16, false>(in, out, *out_t, stream);
    if (!bf16 && e5m2) LaunchTiled<float, true>(in, out, *out_t, stream);
    if (!bf16 && !e5m2) LaunchTiled<float, false>(in, out, *out_t, stream);
    CUDA_RETURN_IF_LAUNCH_FAILED();
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
  AmaxKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(in.data, static_cast<int>(in.dtype), n, amax);
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
                                   int n, int history_len, float fp8_max, int margin,
                                   AmaxAlgo algo, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  UpdateScalesKernel<<<(n + 127) / 128, 128, 0, stream>>>(amax, history, scale, scale_inv, n,
                                                          history_len, fp8_max, margin,
                                                          algo == AmaxAlgo::kMax);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

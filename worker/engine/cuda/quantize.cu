// FP8 casts on the GPU: cast with fused amax (optionally also writing the
// transposed copy), dequantize, amax, byte/word transpose, and the
// delayed/current scaling update over n tensors. Encoding is bit-identical
// to the CPU reference.

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/fp8_device.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

// out[i] = encode(in[i] * scale); out_t (optional) is the [cols, rows]
// transpose; amax of |in| is block-reduced then atomically max-combined.
__global__ void QuantizeKernel(const void* in, int in_dtype, uint8_t* out, uint8_t* out_t,
                               int64_t rows, int64_t cols, const float* scale, float* scale_inv,
                               float* amax, int e5m2) {
  __shared__ float scratch[32];
  const float s = *scale;
  float local = 0.f;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = LoadF(in, in_dtype, i);
    if (!isnan(v)) local = fmaxf(local, fabsf(v));
    const uint8_t code = e5m2 ? EncodeE5M2(v * s) : EncodeE4M3(v * s);
    if (out != nullptr) out[i] = code;
    if (out_t != nullptr) out_t[(i % cols) * rows + i / cols] = code;
  }
  local = BlockMax(local, scratch);
  if (threadIdx.x == 0) {
    if (amax != nullptr) AtomicMaxNonNegative(amax, local);
    if (scale_inv != nullptr && blockIdx.x == 0) *scale_inv = 1.0f / s;
  }
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

template <typename T>
__global__ void TransposeKernel(const T* in, T* out, int64_t rows, int64_t cols) {
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

__global__ void CopyScaleInvKernel(const float* src, float* dst) { *dst = *src; }

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
  const int64_t rows = out_t != nullptr ? in.shape[0] : 1;
  const int64_t cols = out_t != nullptr ? in.shape[1] : n;
  if (n == 0) return absl::OkStatus();
  QuantizeKernel<<<BlocksFor(n, 256), 256, 0, stream>>>(
      in.data, static_cast<int>(in.dtype), static_cast<uint8_t*>(out.data),
      out_t != nullptr ? static_cast<uint8_t*>(out_t->data) : nullptr, rows, cols, out.scale,
      out.scale_inv, out.amax, out.dtype == DType::kE5M2);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  if (out_t != nullptr && out_t->scale_inv != nullptr && out.scale_inv != nullptr) {
    CopyScaleInvKernel<<<1, 1, 0, stream>>>(out.scale_inv, out_t->scale_inv);
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
  if (rows > 0 && cols > 0) {
    dim3 block(32, 8);
    dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
    switch (DTypeSize(in.dtype)) {
      case 1:
        TransposeKernel<uint8_t><<<grid, block, 0, stream>>>(
            static_cast<const uint8_t*>(in.data), static_cast<uint8_t*>(out.data), rows, cols);
        break;
      case 2:
        TransposeKernel<uint16_t><<<grid, block, 0, stream>>>(
            static_cast<const uint16_t*>(in.data), static_cast<uint16_t*>(out.data), rows, cols);
        break;
      default:
        TransposeKernel<uint32_t><<<grid, block, 0, stream>>>(
            static_cast<const uint32_t*>(in.data), static_cast<uint32_t*>(out.data), rows, cols);
    }
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  if (in.scale_inv != nullptr && out.scale_inv != nullptr) {
    CopyScaleInvKernel<<<1, 1, 0, stream>>>(in.scale_inv, out.scale_inv);
    CUDA_RETURN_IF_LAUNCH_FAILED();
  }
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

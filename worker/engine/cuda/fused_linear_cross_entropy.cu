// The per-row part of the fused linear + cross-entropy on the GPU (the GEMMs
// around it are cuBLASLt calls in CudaOps::FusedLinearCrossEntropy). For one
// chunk of fp32 logits [rows, V]: row logsumexp with max subtraction, the
// row's loss added to *loss_sum and 1 to *valid_tokens (atomics: nothing is
// read back to the host), and dlogits = softmax - onehot rounded to bf16
// (zero rows for ignored tokens). A target outside [0, V) raises the device
// error flag and is treated as ignored.

#include <cuda_bf16.h>

#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_util.cuh"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {
namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void CrossEntropyRowsKernel(const float* logits, const int32_t* targets, int vocab,
                                       int ignore_index, float* loss_sum, float* valid_tokens,
                                       __nv_bfloat16* dlogits, int* error_flag) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  __nv_bfloat16* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  const bool bad = target != ignore_index && (target < 0 || target >= vocab);
  if (target == ignore_index || bad) {
    if (bad && threadIdx.x == 0) atomicExch(error_flag, 1);
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) drow[v] = __float2bfloat16_rn(0.f);
    return;
  }
  float m = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) m = fmaxf(m, row[v]);
  m = BlockMax(m, scratch);
  float z = 0.f;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) z += expf(row[v] - m);
  z = BlockSum(z, scratch);
  const float lse = logf(z) + m;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    drow[v] = __float2bfloat16_rn(expf(row[v] - lse) - (v == target ? 1.0f : 0.0f));
  }
  if (threadIdx.x == 0) {
    atomicAdd(loss_sum, lse - row[target]);
    atomicAdd(valid_tokens, 1.0f);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

absl::Status LaunchCrossEntropyRows(const float* logits, const int32_t* targets, int rows,
                                    int vocab, int ignore_index, float* loss_sum,
                                    float* valid_tokens, void* dlogits_bf16, int* error_flag,
                                    cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  CrossEntropyRowsKernel<<<rows, 256, 0, stream>>>(logits, targets, vocab, ignore_index, loss_sum,
                                                   valid_tokens,
                                                   static_cast<__nv_bfloat16*>(dlogits_bf16),
                                                   error_flag);
  CUDA_RETURN_IF_LAUNCH_FAILED();
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

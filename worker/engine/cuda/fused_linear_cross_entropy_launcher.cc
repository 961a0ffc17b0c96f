// The fused loss's chunk loop on the GPU (see
// fused_linear_cross_entropy_launcher.h).
#include "worker/engine/cuda/fused_linear_cross_entropy_launcher.h"

#include <algorithm>
#include <cstdint>

#include "common/status_macros.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/kernels.h"

namespace tessera {
namespace cuda {

absl::Status LaunchFusedLinearCrossEntropy(GemmRunner& gemm, const FusedLossScratch& scratch,
                                           const TensorDesc& x, const TensorDesc& weight,
                                           const TensorDesc& targets, int ignore_index,
                                           int chunk_tokens, float* loss_sum, float* valid_tokens,
                                           bool gradients, const TensorDesc& grad_x,
                                           const TensorDesc& grad_weight,
                                           bool accumulate_grad_weight, int* error_flag,
                                           cudaStream_t stream) {
  const int64_t tokens = x.shape[0], h = x.shape[1], vocab = weight.shape[0];
  if (tokens == 0) {  // no chunks: an empty sum
    if (gradients && !accumulate_grad_weight) {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grad_weight.data, 0, grad_weight.Bytes(), stream));
    }
    return absl::OkStatus();
  }
  const int64_t chunk = std::min<int64_t>(chunk_tokens, tokens);
  ASSIGN_OR_RETURN(void* logits, scratch.logits->Get(chunk * vocab * 2));
  ASSIGN_OR_RETURN(void* row_losses, scratch.row_losses->Get(chunk * sizeof(float)));
  for (int64_t start = 0; start < tokens; start += chunk) {
    const int64_t c = std::min(chunk, tokens - start);
    const TensorDesc xc =
        MakeTensor(static_cast<uint16_t*>(x.data) + start * h, DType::kBFloat16, Shape{c, h});
    const TensorDesc lg = MakeTensor(logits, DType::kBFloat16, Shape{c, vocab});
    RETURN_IF_ERROR(gemm.Run(xc, false, weight, true, lg, false, stream));
    RETURN_IF_ERROR(LaunchCrossEntropyRows(
        logits, static_cast<const int32_t*>(targets.data) + start, static_cast<int>(c),
        static_cast<int>(vocab), ignore_index, static_cast<float*>(row_losses), loss_sum,
        valid_tokens, logits, error_flag, stream));
    if (!gradients) continue;
    const TensorDesc gxc =
        MakeTensor(static_cast<uint16_t*>(grad_x.data) + start * h, DType::kBFloat16, Shape{c, h});
    RETURN_IF_ERROR(gemm.Run(lg, false, weight, false, gxc, false, stream));
    RETURN_IF_ERROR(
        gemm.Run(lg, true, xc, false, grad_weight, accumulate_grad_weight || start > 0, stream));
  }
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace tessera

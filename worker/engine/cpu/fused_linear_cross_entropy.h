// Fused LM head + cross-entropy for the CPU engine (Ops::FusedLinearCrossEntropy).
// Works through the tokens in chunks: only a [chunk, V] block of logits
// ever exists. Per chunk: logits = x_c · Wᵀ (fp32 accumulation of bf16
// products), row logsumexp with max subtraction, loss and valid count,
// dlogits = softmax - onehot rounded to bf16 (zero rows for ignored tokens),
// grad_x_c = dlogits · W (bf16 out), and grad_W += dlogitsᵀ · x_c as a GEMM
// straight into the persistent fp32 buffer (beta = 0 for the first chunk
// unless accumulating, 1 after): no [V, H] gradient temporary. With null
// grad_x and grad_weight data (loss only, as evaluation calls it) the two
// gradient GEMMs are skipped and neither output is touched; the loss and
// count are the same bits as a full call's.
#ifndef TESSERA_WORKER_ENGINE_CPU_FUSED_LINEAR_CROSS_ENTROPY_H_
#define TESSERA_WORKER_ENGINE_CPU_FUSED_LINEAR_CROSS_ENTROPY_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status FusedLinearCrossEntropy(const TensorDesc& x, const TensorDesc& weight,
                                     const TensorDesc& targets, int ignore_index, int chunk_tokens,
                                     float* loss_sum, float* valid_tokens,
                                     const TensorDesc& grad_x, const TensorDesc& grad_weight,
                                     bool accumulate_grad_weight);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_FUSED_LINEAR_CROSS_ENTROPY_H_

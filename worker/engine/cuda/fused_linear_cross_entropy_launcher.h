// The fused linear + cross-entropy on the GPU (Ops::FusedLinearCrossEntropy):
// the chunk loop around the per-row kernel in fused_linear_cross_entropy.cu,
// with the LM head GEMMs on cuBLASLt. Its CPU twin is
// worker/engine/cpu/fused_linear_cross_entropy.cc.
//
// Per chunk of at most chunk_tokens rows: logits [c, V] bf16 = x_c · Wᵀ (as
// under PyTorch's autocast); one kernel turns each row into its loss (fp32
// math, summed in a fixed order into *loss_sum, with the valid rows into
// *valid_tokens: nothing is read back) and writes its bf16 dlogits =
// softmax - onehot over the logits (zero rows for ignored tokens); then,
// unless only the loss is asked for, grad_x_c = dlogits · W (bf16 out) and
// grad_weight (+)= dlogitsᵀ · x_c (fp32 out, bf16 operands: no [V, H]
// temporary, no fp32 copy of an operand; beta = 0 for the first chunk
// unless accumulating, so that GEMM reads no old values). Loss only skips
// both gradient GEMMs, so the loss and count are the same bits as a full
// call's. The chunk buffer (chunk x V bf16) and the row losses live in
// engine scratch, grown on the first call for a shape and then reused.
//
// Determinism: chunks run in token order, so the loss and grad_weight
// accumulate them in that order, and each GEMM runs the algorithm its
// runner fixes for the shape (gemm.h): the same bits every run unless the
// runner times its candidates.
#ifndef TESSERA_WORKER_ENGINE_CUDA_FUSED_LINEAR_CROSS_ENTROPY_LAUNCHER_H_
#define TESSERA_WORKER_ENGINE_CUDA_FUSED_LINEAR_CROSS_ENTROPY_LAUNCHER_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/scratch_buffer.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

// The engine scratch the loop uses.
struct FusedLossScratch {
  ScratchBuffer* logits;      // [chunk, V] bf16: the logits, then (in place) the dlogits
  ScratchBuffer* row_losses;  // [chunk] fp32
};

// Arguments already checked (CheckFusedLinearCrossEntropyArgs);
// `gradients` false is the loss-only mode (grad_x and grad_weight unused).
// A target outside [0, V) other than ignore_index raises *error_flag.
absl::Status LaunchFusedLinearCrossEntropy(GemmRunner& gemm, const FusedLossScratch& scratch,
                                           const TensorDesc& x, const TensorDesc& weight,
                                           const TensorDesc& targets, int ignore_index,
                                           int chunk_tokens, float* loss_sum, float* valid_tokens,
                                           bool gradients, const TensorDesc& grad_x,
                                           const TensorDesc& grad_weight,
                                           bool accumulate_grad_weight, int* error_flag,
                                           cudaStream_t stream);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_FUSED_LINEAR_CROSS_ENTROPY_LAUNCHER_H_

// Argument checks for the CUDA engine's attention and RoPE ops: the ops
// API's shared checks (worker/ops/op_checks.h), then what this engine's
// kernels need, read into their AttentionShape. Kept apart from cuda_ops.cc so the dispatcher stays thin.
// Every failure is INVALID_ARGUMENT naming the argument and the reason.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ARGS_H_
#define TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ARGS_H_

#include "absl/status/statusor.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cuda {

// Head dims the tensor-core attention kernels are built for.
bool SupportedAttentionHeadDim(int64_t head_dim);

// The ops API's attention arguments (worker/ops/op_checks.h), then this
// engine's limits: hd is 64 or 128, and data is 16-byte aligned (the
// kernels move 16-byte chunks).
absl::StatusOr<AttentionShape> ReadAttentionShape(const TensorDesc& qkv, int n_kv_heads,
                                                  const TensorDesc& out, const TensorDesc& lse);
// The same for the backward, with grad_out and grad_qkv (also aligned).
absl::StatusOr<AttentionShape> ReadAttentionBackwardShape(const TensorDesc& grad_out,
                                                          const TensorDesc& qkv, int n_kv_heads,
                                                          const TensorDesc& out,
                                                          const TensorDesc& lse,
                                                          const TensorDesc& grad_qkv);

// Document starts (ops.h) checked like every engine's (dtype, shape, data),
// as the kernels take them: nullptr for whole sequences (WholeSequences())
// or an empty batch. Their content is not read on the host: the kernels
// clamp each start into [0, position], so no content can make them read
// out of bounds, and the batch sources build them by rule.
absl::StatusOr<const int32_t*> ReadDocStarts(const TensorDesc& doc_starts,
                                             const AttentionShape& shape);

// The number of leading heads RoPE rotates in qkv [B, S, nh + 2 nkv, hd]
// bf16 (nh + nkv), after the ops API's RoPE checks.
absl::StatusOr<int> RopeRotatedHeads(const char* name, const TensorDesc& qkv, int n_kv_heads,
                                     float theta);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ARGS_H_

// Argument checks for the CUDA engine's attention and RoPE ops: the packed
// grouped-query layout of worker/ops/ops.h, read into the kernels'
// AttentionShape. Kept apart from cuda_ops.cc so the dispatcher stays thin.
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

// qkv [B, S, nh + 2 nkv, hd] bf16 and out [B, S, nh, hd] bf16, lse
// [B, nh, S] fp32; nkv >= 1 divides nh; hd is 64 or 128; data 16-byte
// aligned (the kernels move 16-byte chunks).
absl::StatusOr<AttentionShape> ReadAttentionShape(const TensorDesc& qkv, int n_kv_heads,
                                                  const TensorDesc& out, const TensorDesc& lse);

// grad_out like out and grad_qkv like qkv (bf16, same shapes, 16-byte
// aligned), for the backward.
absl::Status CheckAttentionGradients(const TensorDesc& grad_out, const TensorDesc& out,
                                     const TensorDesc& grad_qkv, const TensorDesc& qkv);

// The number of leading heads RoPE rotates in qkv [B, S, nh + 2 nkv, hd]
// bf16 (nh + nkv), after checking the layout (hd even, nkv divides nh).
absl::StatusOr<int> RopeRotatedHeads(const char* name, const TensorDesc& qkv, int n_kv_heads);

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ARGS_H_

// Argument checks for attention and RoPE (see attention_args.h).
#include "worker/engine/cuda/attention_args.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cuda {
namespace {

absl::Status Bad(const char* name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", why));
}

absl::Status CheckAligned(const char* name, const TensorDesc& t) {
  RETURN_IF_ERROR(CheckData(name, t));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return Bad(name, "data must be 16-byte aligned");
  }
  return absl::OkStatus();
}

}  // namespace

bool SupportedAttentionHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

absl::StatusOr<AttentionShape> ReadAttentionShape(const TensorDesc& qkv, int n_kv_heads,
                                                  const TensorDesc& out, const TensorDesc& lse) {
  ASSIGN_OR_RETURN(const AttentionDims d, CheckAttentionForwardArgs(qkv, n_kv_heads, out, lse));
  if (!SupportedAttentionHeadDim(d.head_dim)) {
    return Bad("qkv", absl::StrCat("head dim ", d.head_dim,
                                   " is not supported by the CUDA attention (64 or 128)"));
  }
  if (qkv.NumElements() > 0) {
    RETURN_IF_ERROR(CheckAligned("qkv", qkv));
    RETURN_IF_ERROR(CheckAligned("out", out));
  }
  AttentionShape shape;
  shape.batch = d.batch;
  shape.seq = d.seq;
  shape.heads = static_cast<int>(d.heads);
  shape.kv_heads = n_kv_heads;
  shape.head_dim = static_cast<int>(d.head_dim);
  return shape;
}

absl::StatusOr<AttentionShape> ReadAttentionBackwardShape(const TensorDesc& grad_out,
                                                          const TensorDesc& qkv, int n_kv_heads,
                                                          const TensorDesc& out,
                                                          const TensorDesc& lse,
                                                          const TensorDesc& grad_qkv) {
  RETURN_IF_ERROR(
      CheckAttentionBackwardArgs(grad_out, qkv, n_kv_heads, out, lse, grad_qkv).status());
  ASSIGN_OR_RETURN(const AttentionShape shape, ReadAttentionShape(qkv, n_kv_heads, out, lse));
  if (qkv.NumElements() > 0) {
    RETURN_IF_ERROR(CheckAligned("grad_out", grad_out));
    RETURN_IF_ERROR(CheckAligned("grad_qkv", grad_qkv));
  }
  return shape;
}

absl::StatusOr<const int32_t*> ReadDocStarts(const TensorDesc& doc_starts,
                                             const AttentionShape& shape) {
  const AttentionDims dims{shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim};
  ASSIGN_OR_RETURN(const bool documents, CheckDocStartsArgs(doc_starts, dims));
  if (!documents || doc_starts.NumElements() == 0) return nullptr;
  return doc_starts.As<const int32_t>();
}

absl::StatusOr<int> RopeRotatedHeads(const char* name, const TensorDesc& qkv, int n_kv_heads,
                                     float theta) {
  ASSIGN_OR_RETURN(const AttentionDims d, CheckRopeArgs(name, qkv, n_kv_heads, theta));
  return static_cast<int>(d.heads + n_kv_heads);
}

}  // namespace cuda
}  // namespace tessera

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

// Splits a packed head count nh + 2 nkv into nh.
absl::StatusOr<int64_t> QueryHeads(const char* name, int64_t packed_heads, int n_kv_heads) {
  if (n_kv_heads < 1) return Bad("n_kv_heads", absl::StrCat("must be >= 1 (got ", n_kv_heads, ")"));
  const int64_t heads = packed_heads - 2 * int64_t{n_kv_heads};
  if (heads < n_kv_heads || heads % n_kv_heads != 0) {
    return Bad(name, absl::StrCat("dim 2 is ", packed_heads, ": it must be nh + 2 * n_kv_heads (",
                                  n_kv_heads, ") with n_kv_heads dividing nh"));
  }
  return heads;
}

}  // namespace

bool SupportedAttentionHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

absl::StatusOr<AttentionShape> ReadAttentionShape(const TensorDesc& qkv, int n_kv_heads,
                                                  const TensorDesc& out, const TensorDesc& lse) {
  RETURN_IF_ERROR(CheckDType("qkv", qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("qkv", qkv, 4));
  RETURN_IF_ERROR(CheckDType("out", out, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("out", out, 4));
  AttentionShape shape;
  shape.batch = qkv.shape[0];
  shape.seq = qkv.shape[1];
  shape.heads = static_cast<int>(out.shape[2]);
  shape.kv_heads = n_kv_heads;
  shape.head_dim = static_cast<int>(qkv.shape[3]);
  ASSIGN_OR_RETURN(int64_t heads, QueryHeads("qkv", qkv.shape[2], n_kv_heads));
  if (heads != out.shape[2]) {
    return Bad("qkv", absl::StrCat("holds ", heads, " query heads but out has ", out.shape[2]));
  }
  if (!SupportedAttentionHeadDim(shape.head_dim)) {
    return Bad("qkv", absl::StrCat("head dim ", shape.head_dim,
                                   " is not supported by the CUDA attention (64 or 128)"));
  }
  RETURN_IF_ERROR(CheckShape(
      "out", out, Shape{shape.batch, shape.seq, shape.heads, shape.head_dim}));
  RETURN_IF_ERROR(CheckDType("lse", lse, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckShape("lse", lse, Shape{shape.batch, shape.heads, shape.seq}));
  if (qkv.NumElements() > 0) {
    RETURN_IF_ERROR(CheckAligned("qkv", qkv));
    RETURN_IF_ERROR(CheckAligned("out", out));
    RETURN_IF_ERROR(CheckData("lse", lse));
  }
  return shape;
}

absl::Status CheckAttentionGradients(const TensorDesc& grad_out, const TensorDesc& out,
                                     const TensorDesc& grad_qkv, const TensorDesc& qkv) {
  RETURN_IF_ERROR(CheckDType("grad_out", grad_out, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape("grad_out", grad_out, out.shape));
  RETURN_IF_ERROR(CheckDType("grad_qkv", grad_qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape("grad_qkv", grad_qkv, qkv.shape));
  if (qkv.NumElements() > 0) {
    RETURN_IF_ERROR(CheckAligned("grad_out", grad_out));
    RETURN_IF_ERROR(CheckAligned("grad_qkv", grad_qkv));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RopeRotatedHeads(const char* name, const TensorDesc& qkv, int n_kv_heads) {
  RETURN_IF_ERROR(CheckDType(name, qkv, {DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank(name, qkv, 4));
  ASSIGN_OR_RETURN(int64_t heads, QueryHeads(name, qkv.shape[2], n_kv_heads));
  if (qkv.shape[3] < 2 || qkv.shape[3] % 2 != 0) {
    return Bad(name, absl::StrCat("head dim must be even and >= 2 (got ", qkv.shape[3], ")"));
  }
  if (qkv.NumElements() > 0) RETURN_IF_ERROR(CheckData(name, qkv));
  return static_cast<int>(heads + n_kv_heads);
}

}  // namespace cuda
}  // namespace tessera

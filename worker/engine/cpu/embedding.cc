// Embedding gather and deterministic scatter-add for the CPU reference engine
// (semantics in embedding.h).
#include "worker/engine/cpu/embedding.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

// ids must be a rank-1 int32 tensor whose every entry lies in [0, vocab).
absl::Status CheckIds(const TensorDesc& ids, int64_t vocab) {
  RETURN_IF_ERROR(CheckDType("ids", ids, {DType::kInt32}));
  RETURN_IF_ERROR(CheckRank("ids", ids, 1));
  RETURN_IF_ERROR(CheckData("ids", ids));
  const int32_t* id = ids.As<const int32_t>();
  for (int64_t t = 0; t < ids.NumElements(); ++t) {
    if (id[t] < 0 || id[t] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("ids: id ", id[t], " at position ", t,
                                                     " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table, const TensorDesc& out) {
  RETURN_IF_ERROR(CheckDType("table", table, {DType::kFloat32, DType::kBFloat16}));
  RETURN_IF_ERROR(CheckRank("table", table, 2));
  RETURN_IF_ERROR(CheckData("table", table));
  const int64_t vocab = table.shape[0], h = table.shape[1];
  RETURN_IF_ERROR(CheckIds(ids, vocab));
  const int64_t tokens = ids.shape[0];
  RETURN_IF_ERROR(CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape("out", out, Shape{tokens, h}));
  RETURN_IF_ERROR(CheckData("out", out));
  const int32_t* id = ids.As<const int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t src = static_cast<int64_t>(id[t]) * h, dst = t * h;
    for (int64_t j = 0; j < h; ++j) Store(out, dst + j, Load(table, src + j));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                               const TensorDesc& grad_table) {
  RETURN_IF_ERROR(CheckDType("grad_table", grad_table, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckRank("grad_table", grad_table, 2));
  RETURN_IF_ERROR(CheckData("grad_table", grad_table));
  const int64_t vocab = grad_table.shape[0], h = grad_table.shape[1];
  RETURN_IF_ERROR(CheckIds(ids, vocab));
  const int64_t tokens = ids.shape[0];
  RETURN_IF_ERROR(CheckDType("grad_out", grad_out, {DType::kFloat32, DType::kBFloat16}));
  RETURN_IF_ERROR(CheckShape("grad_out", grad_out, Shape{tokens, h}));
  RETURN_IF_ERROR(CheckData("grad_out", grad_out));
  const int32_t* id = ids.As<const int32_t>();
  float* grad = grad_table.As<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = grad + static_cast<int64_t>(id[t]) * h;
    for (int64_t j = 0; j < h; ++j) row[j] += Load(grad_out, t * h + j);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

// Embedding gather and deterministic scatter-add for the CPU reference engine
// (semantics in embedding.h).
#include "worker/engine/cpu/embedding.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
namespace {

// Every id must lie in [0, vocab): the CPU engine can read them before it
// runs (the CUDA engine flags a bad one from the kernel instead).
absl::Status CheckIdsInRange(const TensorDesc& ids, int64_t vocab) {
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
  RETURN_IF_ERROR(CheckEmbeddingForwardArgs(ids, table, out));
  const int64_t vocab = table.shape[0], h = table.shape[1];
  RETURN_IF_ERROR(CheckIdsInRange(ids, vocab));
  const int64_t tokens = ids.shape[0];
  const int32_t* id = ids.As<const int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t src = static_cast<int64_t>(id[t]) * h, dst = t * h;
    for (int64_t j = 0; j < h; ++j) Store(out, dst + j, Load(table, src + j));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                               const TensorDesc& grad_table, int64_t first_row, int64_t vocab) {
  RETURN_IF_ERROR(CheckEmbeddingBackwardArgs(ids, grad_out, grad_table, first_row, vocab));
  const int64_t rows = grad_table.shape[0], h = grad_table.shape[1];
  RETURN_IF_ERROR(CheckIdsInRange(ids, vocab));
  const int64_t tokens = ids.shape[0];
  const int32_t* id = ids.As<const int32_t>();
  float* grad = grad_table.As<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t local = static_cast<int64_t>(id[t]) - first_row;
    if (local < 0 || local >= rows) continue;  // another rank's row
    float* row = grad + local * h;
    for (int64_t j = 0; j < h; ++j) row[j] += Load(grad_out, t * h + j);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

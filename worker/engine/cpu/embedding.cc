// Embedding gather and scatter-add for the CPU engine (see embedding.h).
#include "worker/engine/cpu/embedding.h"

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

absl::Status CheckIds(const TensorDesc& ids, int64_t vocab) {
  if (absl::Status s = CheckDType("ids", ids, {DType::kInt32}); !s.ok()) return s;
  const int32_t* p = static_cast<const int32_t*>(ids.data);
  for (int64_t t = 0; t < ids.NumElements(); ++t) {
    if (p[t] < 0 || p[t] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids: token ", p[t], " at position ", t, " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table, const TensorDesc& out) {
  if (absl::Status s = CheckRank("table", table, 2); !s.ok()) return s;
  if (absl::Status s = CheckDType("table", table, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (absl::Status s = CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  const int64_t vocab = table.shape[0], h = table.shape[1], tokens = ids.NumElements();
  if (absl::Status s = CheckShape("out", out, Shape{tokens, h}); !s.ok()) return s;
  if (absl::Status s = CheckIds(ids, vocab); !s.ok()) return s;
  const int32_t* id = static_cast<const int32_t*>(ids.data);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < h; ++j) Store(out, t * h + j, Load(table, id[t] * h + j));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                               const TensorDesc& grad_table) {
  if (absl::Status s = CheckRank("grad_table", grad_table, 2); !s.ok()) return s;
  if (absl::Status s = CheckDType("grad_table", grad_table, {DType::kFloat32}); !s.ok()) return s;
  const int64_t vocab = grad_table.shape[0], h = grad_table.shape[1], tokens = ids.NumElements();
  if (absl::Status s = CheckShape("grad_out", grad_out, Shape{tokens, h}); !s.ok()) return s;
  if (absl::Status s = CheckIds(ids, vocab); !s.ok()) return s;
  const int32_t* id = static_cast<const int32_t*>(ids.data);
  float* g = static_cast<float*>(grad_table.data);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < h; ++j) g[id[t] * h + j] += Load(grad_out, t * h + j);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

// Add and Cast for the CPU engine (see elementwise.h).
#include "worker/engine/cpu/elementwise.h"

#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {

absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out) {
  for (auto [name, t] : {std::pair<const char*, const TensorDesc*>{"a", &a}, {"b", &b}, {"out", &out}}) {
    if (absl::Status s = CheckDType(name, *t, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
    if (t->NumElements() != out.NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": element count differs"));
    }
  }
  for (int64_t i = 0; i < out.NumElements(); ++i) Store(out, i, Load(a, i) + Load(b, i));
  return absl::OkStatus();
}

absl::Status Cast(const TensorDesc& in, const TensorDesc& out) {
  if (absl::Status s = CheckDType("in", in, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (absl::Status s = CheckDType("out", out, {DType::kFloat32, DType::kBFloat16}); !s.ok()) return s;
  if (in.NumElements() != out.NumElements()) {
    return absl::InvalidArgumentError("out: element count differs from in");
  }
  for (int64_t i = 0; i < in.NumElements(); ++i) Store(out, i, Load(in, i));
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

// Add and Cast for the CPU reference engine (semantics in elementwise.h).
// Each element is read as float, combined in fp32 and stored with the output
// dtype's rounding, one element at a time, so an output aliasing an input is
// safe.
#include "worker/engine/cpu/elementwise.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"

namespace tessera {
namespace cpu {
namespace {

// An fp32 or bf16 tensor of exactly `count` elements with data behind it.
absl::Status CheckOperand(const char* name, const TensorDesc& t, int64_t count) {
  RETURN_IF_ERROR(CheckDType(name, t, {DType::kFloat32, DType::kBFloat16}));
  if (t.NumElements() != count) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": has ", t.NumElements(),
                                                   " elements, expected ", count, " (",
                                                   t.shape.ToString(), ")"));
  }
  return CheckData(name, t);
}

}  // namespace

absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckOperand("out", out, n));
  RETURN_IF_ERROR(CheckOperand("a", a, n));
  RETURN_IF_ERROR(CheckOperand("b", b, n));
  for (int64_t i = 0; i < n; ++i) Store(out, i, Load(a, i) + Load(b, i));
  return absl::OkStatus();
}

absl::Status Cast(const TensorDesc& in, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckOperand("out", out, n));
  RETURN_IF_ERROR(CheckOperand("in", in, n));
  if (in.dtype == out.dtype) {
    if (n > 0 && in.data != out.data) std::memmove(out.data, in.data, out.Bytes());
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n; ++i) Store(out, i, Load(in, i));
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

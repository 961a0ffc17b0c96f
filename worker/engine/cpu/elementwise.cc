// Add and Cast for the CPU reference engine (semantics in elementwise.h).
// Each element is read as float, combined in fp32 and stored with the output
// dtype's rounding, one element at a time, so an output aliasing an input is
// safe.
#include "worker/engine/cpu/elementwise.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/tensor_access.h"
#include "worker/ops/op_checks.h"

namespace tessera {
namespace cpu {
absl::Status Add(const TensorDesc& a, const TensorDesc& b, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckAddArgs(a, b, out));
  for (int64_t i = 0; i < n; ++i) Store(out, i, Load(a, i) + Load(b, i));
  return absl::OkStatus();
}

absl::Status Cast(const TensorDesc& in, const TensorDesc& out) {
  const int64_t n = out.NumElements();
  RETURN_IF_ERROR(CheckCastArgs(in, out));
  if (in.dtype == out.dtype) {
    if (n > 0 && in.data != out.data) std::memmove(out.data, in.data, out.Bytes());
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n; ++i) Store(out, i, Load(in, i));
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tessera

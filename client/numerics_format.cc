// FP8 statistics for people (see numerics_format.h).
#include "client/numerics_format.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fp8_numerics.h"

namespace tessera {
namespace {

std::string Percent(double fraction) { return absl::StrFormat("%.4f%%", 100 * fraction); }

}  // namespace

std::string FormatNumericsTable(const v1::Fp8Numerics& record, int top) {
  const std::vector<v1::Fp8TensorStats> worst = WorstFp8Tensors(record, top);
  std::string out = absl::StrCat("FP8 statistics at step ", record.step(), " (",
                                 record.tensors_size(), " tensors; ",
                                 static_cast<int>(worst.size()) < record.tensors_size()
                                     ? absl::StrCat("worst ", worst.size(), " first")
                                     : "worst first",
                                 ")\n");
  absl::StrAppendFormat(&out, "%-28s %-6s %12s %12s %11s %11s\n", "TENSOR", "FORMAT", "AMAX",
                        "SCALE", "SATURATED", "UNDERFLOW");
  for (const v1::Fp8TensorStats& t : worst) {
    absl::StrAppendFormat(&out, "%-28s %-6s %12.5g %12.5g %11s %11s\n", Fp8TensorName(t),
                          t.format(), t.amax(), t.scale(), Percent(t.saturated_fraction()),
                          Percent(t.underflow_fraction()));
  }
  return out;
}

v1::Fp8Numerics WorstOnly(const v1::Fp8Numerics& record, int top) {
  v1::Fp8Numerics out = record;
  out.clear_tensors();
  for (v1::Fp8TensorStats& t : WorstFp8Tensors(record, top)) *out.add_tensors() = std::move(t);
  return out;
}

std::string NumericsLine(const v1::Fp8Numerics& record) {
  const v1::Fp8TensorStats* saturated = nullptr;
  const v1::Fp8TensorStats* underflowed = nullptr;
  for (const v1::Fp8TensorStats& t : record.tensors()) {
    if (saturated == nullptr || t.saturated_fraction() > saturated->saturated_fraction()) {
      saturated = &t;
    }
    if (underflowed == nullptr || t.underflow_fraction() > underflowed->underflow_fraction()) {
      underflowed = &t;
    }
  }
  if (saturated == nullptr) return absl::StrCat("[numerics] step ", record.step(), ": no tensors");
  return absl::StrFormat(
      "[numerics] step %d: worst saturation %.2f%% (%s), worst underflow %.2f%% (%s), %d tensors",
      record.step(), 100 * saturated->saturated_fraction(), Fp8TensorName(*saturated),
      100 * underflowed->underflow_fraction(), Fp8TensorName(*underflowed),
      record.tensors_size());
}

}  // namespace tessera

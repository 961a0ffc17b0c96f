// WARNING events of an FP8 statistics record (see fp8_numerics_warning.h).
#include "server/fp8_numerics_warning.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fp8_numerics.h"

namespace tessera {
namespace {

v1::Fp8NumericsWarning MakeWarning(int step, const v1::Fp8TensorStats& t,
                                   v1::Fp8NumericsWarning::Kind kind, double threshold) {
  v1::Fp8NumericsWarning w;
  w.set_severity(v1::WARNING);
  w.set_step(step);
  w.set_kind(kind);
  *w.mutable_tensor() = t;
  const bool saturation = kind == v1::Fp8NumericsWarning::SATURATION;
  w.set_fraction(saturation ? t.saturated_fraction() : t.underflow_fraction());
  w.set_threshold(threshold);
  w.set_message(absl::StrFormat(
      "step %d: %s (%s): %.2f%% of values %s (threshold %.2f%%; amax %g, scale %g)", step,
      Fp8TensorName(t), t.format(), 100 * w.fraction(),
      saturation ? "saturate at the format's maximum" : "underflow to zero",
      100 * threshold, t.amax(), t.scale()));
  return w;
}

}  // namespace

std::vector<v1::Fp8NumericsWarning> Fp8NumericsWarnings(const v1::Fp8Numerics& record,
                                                        const v1::Fp8Recipe& recipe) {
  const double saturation = SaturationWarnFraction(recipe);
  const double underflow = UnderflowWarnFraction(recipe);
  std::vector<v1::Fp8NumericsWarning> warnings;
  int passed = 0;
  // Worst first: saturation (the large values lost) before underflow.
  // Step 0 under delayed scaling: only the weights had a measured scale.
  const bool weights_only = record.step() == 0 && !recipe.has_current();
  const auto judged = [weights_only](const v1::Fp8TensorStats& t) {
    return !weights_only || t.role() == v1::Fp8TensorStats::WEIGHT;
  };
  for (const v1::Fp8TensorStats& t : WorstFp8Tensors(record, 0)) {
    if (judged(t) && t.saturated_fraction() > saturation) {
      ++passed;
      if (warnings.size() < kMaxFp8Warnings) {
        warnings.push_back(
            MakeWarning(record.step(), t, v1::Fp8NumericsWarning::SATURATION, saturation));
      }
    }
  }
  std::vector<v1::Fp8TensorStats> by_underflow(record.tensors().begin(), record.tensors().end());
  std::stable_sort(by_underflow.begin(), by_underflow.end(),
                   [](const v1::Fp8TensorStats& a, const v1::Fp8TensorStats& b) {
                     return a.underflow_fraction() > b.underflow_fraction();
                   });
  for (const v1::Fp8TensorStats& t : by_underflow) {
    if (judged(t) && t.underflow_fraction() > underflow) {
      ++passed;
      if (warnings.size() < kMaxFp8Warnings) {
        warnings.push_back(
            MakeWarning(record.step(), t, v1::Fp8NumericsWarning::UNDERFLOW, underflow));
      }
    }
  }
  if (passed > static_cast<int>(warnings.size())) {
    v1::Fp8NumericsWarning& last = warnings.back();
    last.set_message(absl::StrCat(last.message(), " (and ", passed - warnings.size(),
                                  " more past a threshold at this step: `tessera numerics` lists them)"));
  }
  return warnings;
}

}  // namespace tessera

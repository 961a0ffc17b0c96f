// ShadowGapThreshold and ShadowGapWarning (see shadow_gap.h).
#include "common/shadow_gap.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/spec_limits.h"

namespace tessera {

float ShadowGapThreshold(const v1::Fp8Recipe& recipe) {
  return recipe.shadow_gap_warn() > 0 ? recipe.shadow_gap_warn() : kDefaultShadowGapWarn;
}

std::string ShadowGapWarning(const v1::Fp8Recipe& recipe, float fp8_loss, float bf16_loss) {
  const float gap = fp8_loss - bf16_loss;
  const float threshold = ShadowGapThreshold(recipe);
  if (std::isfinite(gap) && std::fabs(gap) <= threshold) return std::string();
  return absl::StrFormat(
      "FP8 loss %.4f is %+.4f from its bf16 shadow %.4f on the held-out batch "
      "(|gap| above fp8.shadow_gap_warn %g): FP8 may be diverging from bf16; check the "
      "FP8 recipe (amax history, margin) or run this job with fp8.disabled to compare",
      fp8_loss, gap, bf16_loss, threshold);
}

}  // namespace tessera

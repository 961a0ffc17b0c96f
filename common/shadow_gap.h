// When the bf16 shadow loss (Fp8Recipe.shadow_interval_steps) warns: the
// rule the coordinator applies to each shadow step's record and the worker
// to its log line, kept here once so the two agree.
#ifndef TESSERA_COMMON_SHADOW_GAP_H_
#define TESSERA_COMMON_SHADOW_GAP_H_

#include <string>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// fp8.shadow_gap_warn, or kDefaultShadowGapWarn (spec_limits.h) when it is 0.
float ShadowGapThreshold(const v1::Fp8Recipe& recipe);

// The warning for a shadow step whose FP8 and bf16 losses are these, or an
// empty string. It warns when |fp8_loss - bf16_loss| exceeds the threshold
// (FP8 far better than bf16 is as suspect as far worse) and when either
// loss is not finite.
std::string ShadowGapWarning(const v1::Fp8Recipe& recipe, float fp8_loss, float bf16_loss);

}  // namespace tessera

#endif  // TESSERA_COMMON_SHADOW_GAP_H_

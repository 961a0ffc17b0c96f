// EvaluatesAfterStep (see evaluation_schedule.h).
#include "common/evaluation_schedule.h"

namespace tessera {

bool EvaluatesAfterStep(const v1::JobSpec& spec, int step) {
  if (!spec.data().has_validation()) return false;
  const int interval = spec.data().validation().eval_interval_steps();
  if (step + 1 == spec.steps()) return true;
  return interval > 0 && (step + 1) % interval == 0;
}

}  // namespace tessera

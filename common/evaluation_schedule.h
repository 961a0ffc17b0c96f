// When a job with a validation section is evaluated. Workers run the
// evaluation after those steps and report its loss with the step; the
// coordinator's test double of a worker (server/fake_worker_connection.h)
// reports one after the same steps, so both follow this one rule.
#ifndef TESSERA_COMMON_EVALUATION_SCHEDULE_H_
#define TESSERA_COMMON_EVALUATION_SCHEDULE_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Whether an evaluation runs after (0-based) `step`: every
// eval_interval_steps steps and after the job's last step. False without a
// validation section.
bool EvaluatesAfterStep(const v1::JobSpec& spec, int step);

}  // namespace tessera

#endif  // TESSERA_COMMON_EVALUATION_SCHEDULE_H_

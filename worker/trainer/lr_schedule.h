// Learning-rate schedules: linear warmup from 0 to lr over warmup_steps,
// then constant, or cosine / linear decay to min_lr at the last step.
#ifndef TESSERA_WORKER_TRAINER_LR_SCHEDULE_H_
#define TESSERA_WORKER_TRAINER_LR_SCHEDULE_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Learning rate for 0-based `step` of `total_steps`.
float LearningRate(const v1::OptimizerConfig& config, int step, int total_steps);

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_LR_SCHEDULE_H_

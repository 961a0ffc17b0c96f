// Learning-rate schedules (see lr_schedule.h).
#include "worker/trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace tessera {

float LearningRate(const v1::OptimizerConfig& c, int step, int total_steps) {
  const float lr = c.lr();
  const int warmup = c.warmup_steps();
  if (warmup > 0 && step < warmup) return lr * static_cast<float>(step + 1) / (warmup + 1);
  if (c.schedule() == v1::OptimizerConfig::CONSTANT) return lr;
  const int decay_steps = std::max(1, total_steps - 1 - warmup);
  const float progress =
      std::clamp(static_cast<float>(step - warmup) / static_cast<float>(decay_steps), 0.f, 1.f);
  const float min_lr = c.min_lr();
  if (c.schedule() == v1::OptimizerConfig::LINEAR) return lr + (min_lr - lr) * progress;
  return min_lr + 0.5f * (lr - min_lr) * (1.0f + std::cos(static_cast<float>(M_PI) * progress));
}

}  // namespace tessera

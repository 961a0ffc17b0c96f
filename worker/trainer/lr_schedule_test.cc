// The schedules' shape: warmup ramps, decays end at min_lr, constant holds.
#include "worker/trainer/lr_schedule.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::OptimizerConfig Config(v1::OptimizerConfig::Schedule schedule) {
  v1::OptimizerConfig c;
  c.set_lr(1.0f);
  c.set_min_lr(0.1f);
  c.set_warmup_steps(4);
  c.set_schedule(schedule);
  return c;
}

TEST(LrSchedule, WarmupRampsUpFromNearZero) {
  v1::OptimizerConfig c = Config(v1::OptimizerConfig::COSINE);
  EXPECT_NEAR(LearningRate(c, 0, 100), 0.2f, 1e-6);
  EXPECT_LT(LearningRate(c, 0, 100), LearningRate(c, 3, 100));
  EXPECT_NEAR(LearningRate(c, 4, 100), 1.0f, 1e-6);
}

TEST(LrSchedule, CosineAndLinearEndAtMinLr) {
  for (auto s : {v1::OptimizerConfig::COSINE, v1::OptimizerConfig::LINEAR}) {
    v1::OptimizerConfig c = Config(s);
    EXPECT_NEAR(LearningRate(c, 99, 100), 0.1f, 1e-6);
    float mid = LearningRate(c, 50, 100);
    EXPECT_GT(mid, 0.1f);
    EXPECT_LT(mid, 1.0f);
  }
}

TEST(LrSchedule, ConstantHoldsAfterWarmup) {
  v1::OptimizerConfig c = Config(v1::OptimizerConfig::CONSTANT);
  EXPECT_FLOAT_EQ(LearningRate(c, 10, 100), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(c, 99, 100), 1.0f);
}

}  // namespace
}  // namespace tessera

// Evaluations fall every eval_interval_steps steps and after the last step,
// and never without a validation section.
#include "common/evaluation_schedule.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(EvaluationSchedule, EvaluationsFallOnTheIntervalAndAfterTheLastStep) {
  v1::JobSpec spec;
  spec.set_steps(10);
  spec.mutable_data()->mutable_validation()->set_eval_interval_steps(3);
  std::vector<int> after;
  for (int step = 0; step < 10; ++step) {
    if (EvaluatesAfterStep(spec, step)) after.push_back(step);
  }
  EXPECT_EQ(after, (std::vector<int>{2, 5, 8, 9}));
  v1::JobSpec none = spec;
  none.mutable_data()->clear_validation();
  EXPECT_FALSE(EvaluatesAfterStep(none, 9));
}

}  // namespace
}  // namespace tessera

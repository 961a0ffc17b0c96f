// The coordinator's step records carry the validation loss the workers
// report, on exactly the steps after which they evaluated (every
// eval_interval_steps steps and the last), and on no others; a job without
// data.validation carries none. Likewise the bf16 shadow loss
// (fp8.shadow_interval_steps), with the coordinator's warning on the steps
// whose gap is past fp8.shadow_gap_warn.
#include <vector>

#include "gtest/gtest.h"
#include "server/fake_worker_connection.h"
#include "server/job_runner.h"

namespace tessera {
namespace {

std::vector<v1::StepMetrics> RunJobOn(const v1::JobSpec& spec, int world) {
  std::vector<std::unique_ptr<WorkerConnection>> connections;
  std::vector<std::string> ids;
  for (int r = 0; r < world; ++r) {
    connections.push_back(std::make_unique<FakeWorkerConnection>(r, FakeWorkerBehavior{}));
    ids.push_back("w-" + std::to_string(r + 1));
  }
  absl::Mutex mu;
  std::vector<v1::StepMetrics> metrics;
  JobRunnerCallbacks callbacks;
  callbacks.on_step = [&](const v1::StepMetrics& m) {
    absl::MutexLock lock(&mu);
    metrics.push_back(m);
  };
  v1::JobSpec sized = spec;
  sized.set_world_size(world);
  JobRunner runner("job-v", sized, ids, std::move(connections), "coord:1", absl::Seconds(5),
                   callbacks, JobAttempt{});
  JobOutcome outcome = runner.Run();
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.reason;
  absl::MutexLock lock(&mu);
  return metrics;
}

TEST(JobRunnerValidation, StepMetricsCarryTheValidationLossOnEvaluatedSteps) {
  v1::JobSpec spec;
  spec.set_steps(7);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file("/data/val.tok");
  v->set_eval_interval_steps(3);
  v->set_eval_batches(1);
  std::vector<v1::StepMetrics> metrics = RunJobOn(spec, 2);
  ASSERT_EQ(metrics.size(), 7u);
  std::vector<int> evaluated;
  for (const v1::StepMetrics& m : metrics) {
    if (!m.has_validation()) continue;
    evaluated.push_back(m.step());
    EXPECT_FLOAT_EQ(m.validation().loss(), 3.5f - 0.01f * m.step());
    EXPECT_EQ(m.validation().tokens(), 40);  // global already: not summed over ranks
  }
  EXPECT_EQ(evaluated, (std::vector<int>{2, 5, 6}));
}

TEST(JobRunnerValidation, NoValidationSectionNoValidationLoss) {
  v1::JobSpec spec;
  spec.set_steps(4);
  for (const v1::StepMetrics& m : RunJobOn(spec, 2)) EXPECT_FALSE(m.has_validation()) << m.step();
}

TEST(JobRunnerValidation, ShadowStepsCarryTheLossesAndWarnOnlyPastTheThreshold) {
  for (const float warn : {0.05f, 0.01f}) {
    SCOPED_TRACE(warn);
    v1::JobSpec spec;
    spec.set_steps(6);
    spec.mutable_fp8()->set_shadow_interval_steps(3);
    spec.mutable_fp8()->set_shadow_gap_warn(warn);
    std::vector<int> shadowed;
    for (const v1::StepMetrics& m : RunJobOn(spec, 2)) {
      if (!m.has_shadow()) continue;
      shadowed.push_back(m.step());
      EXPECT_FLOAT_EQ(m.shadow().fp8_loss(), 3.02f - 0.01f * m.step());
      EXPECT_FLOAT_EQ(m.shadow().bf16_loss(), 3.0f - 0.01f * m.step());
      EXPECT_NEAR(m.shadow().gap(), 0.02f, 1e-6f);
      EXPECT_EQ(m.shadow().tokens(), 50);         // global already
      EXPECT_DOUBLE_EQ(m.shadow().time_s(), 0.002);  // the slowest rank's
      // The gap 0.02 is within 0.05 and past 0.01.
      EXPECT_EQ(m.shadow().warning().empty(), warn == 0.05f) << m.shadow().warning();
    }
    EXPECT_EQ(shadowed, (std::vector<int>{2, 5}));
  }
}

TEST(JobRunnerValidation, NoShadowIntervalNoShadowLoss) {
  v1::JobSpec spec;
  spec.set_steps(4);
  for (const v1::StepMetrics& m : RunJobOn(spec, 2)) EXPECT_FALSE(m.has_shadow()) << m.step();
}

}  // namespace
}  // namespace tessera

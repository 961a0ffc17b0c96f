// The coordinator's step records carry the validation loss the workers
// report, on exactly the steps after which they evaluated (every
// eval_interval_steps steps and the last), and on no others; a job without
// data.validation carries none.
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

}  // namespace
}  // namespace tessera

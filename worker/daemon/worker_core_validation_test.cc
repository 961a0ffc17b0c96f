// Validation through the worker's command loop: RunSteps evaluates after
// every eval_interval_steps-th step and after the job's last step, across
// RunSteps chunks, and the step's report carries the result; other steps,
// and jobs without data.validation, carry none.
#include <vector>

#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/worker_core.h"

namespace tessera {
namespace {

WorkerCore::TrainerFactory Factory() {
  return [](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer());
  };
}

v1::SetupJobRequest SetupRequest(const std::string& job, bool validation) {
  v1::SetupJobRequest r;
  r.set_job_id(job);
  r.set_rank(0);
  r.set_world_size(1);
  r.mutable_spec()->mutable_model()->set_seq_len(8);
  r.mutable_spec()->mutable_data()->set_micro_batch_size(2);
  r.mutable_spec()->set_steps(7);
  if (validation) {
    v1::ValidationConfig* v = r.mutable_spec()->mutable_data()->mutable_validation();
    v->set_token_file("/data/val.tok");
    v->set_eval_interval_steps(3);
    v->set_eval_batches(2);
  }
  return r;
}

std::vector<StepReport> RunJob(bool validation) {
  WorkerCore core(Factory());
  EXPECT_TRUE(core.SetupJob(SetupRequest("job-v", validation)).ok());
  EXPECT_TRUE(core.InitCollective("job-v", nullptr, "h", absl::Seconds(1)).ok());
  std::vector<StepReport> reports;
  auto keep = [&reports](const StepReport& r) { reports.push_back(r); };
  EXPECT_TRUE(core.RunSteps("job-v", 0, 4, keep).ok());
  EXPECT_TRUE(core.RunSteps("job-v", 4, 3, keep).ok());
  EXPECT_TRUE(core.Abort("job-v", "done").ok());
  return reports;
}

TEST(WorkerCoreValidation, EvaluatesOnTheIntervalAndAfterTheLastStep) {
  std::vector<StepReport> reports = RunJob(true);
  ASSERT_EQ(reports.size(), 7u);
  std::vector<int> evaluated;
  for (const StepReport& r : reports) {
    if (!r.validation.has_value()) continue;
    evaluated.push_back(r.step);
    EXPECT_EQ(r.validation->tokens, 2 * 2 * 8);  // eval_batches x micro-batch x seq_len
    EXPECT_GT(r.validation->loss, 0.f);
  }
  EXPECT_EQ(evaluated, (std::vector<int>{2, 5, 6}));
  // Each evaluation saw the weights after its own step.
  EXPECT_GT(reports[2].validation->loss, reports[5].validation->loss);
  EXPECT_GT(reports[5].validation->loss, reports[6].validation->loss);
}

TEST(WorkerCoreValidation, NoValidationSectionMeansNoEvaluation) {
  for (const StepReport& r : RunJob(false)) EXPECT_FALSE(r.validation.has_value()) << r.step;
}

}  // namespace
}  // namespace tessera

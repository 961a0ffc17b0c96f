// Validation on one GPU: an evaluation leaves the training state
// byte-identical (master weights, Adam m and v, FP8 shards and the FP8
// scaling block, read back through checkpoints taken before and after it)
// with FP8 delayed scaling (where the fused SwiGLU quantize records
// amaxes), current scaling and bf16; a run with evaluations trains as a run
// without them does (within the run-to-run spread of the CUDA engine, whose
// embedding backward and fused loss accumulate with atomics, so two GPU runs
// are not bit-identical even without evaluations); and the GPU's validation
// loss matches the CPU reference engine's. Needs a GPU.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/synthetic_task.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/gpu_trainer_for_test.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

struct TrainedRun {
  std::vector<float> losses;
  std::vector<float> validation;
  bool state_unchanged = false;  // around the evaluation after step 2
};

TrainedRun Train(FsdpTrainer& trainer, const v1::JobSpec& spec, bool evaluate) {
  TrainedRun run;
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(60)).ok());
  for (int step = -1; step < spec.steps(); ++step) {
    if (step >= 0) {
      auto report = trainer.RunStep(step);
      EXPECT_TRUE(report.ok()) << report.status();
      if (!report.ok()) break;
      run.losses.push_back(report->loss);
    }
    if (evaluate && step == 2) {
      const char* tmp = std::getenv("TEST_TMPDIR");
      const std::string root = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/eval-gpu-", getpid());
      mkdir(root.c_str(), 0755);
      EXPECT_TRUE(trainer.Checkpoint(3, root + "/before").ok());
      auto v = trainer.Evaluate();
      EXPECT_TRUE(v.ok()) << v.status();
      EXPECT_TRUE(trainer.Checkpoint(3, root + "/after").ok());
      const std::string a = ReadFileToString(StepDir(root + "/before", 3) + "/rank-0.state");
      const std::string b = ReadFileToString(StepDir(root + "/after", 3) + "/rank-0.state");
      run.state_unchanged = !a.empty() && a == b;
      if (v.ok()) run.validation.push_back(v->loss);
    } else if (evaluate) {
      auto v = trainer.Evaluate();
      EXPECT_TRUE(v.ok()) << v.status();
      if (!v.ok()) break;
      run.validation.push_back(v->loss);
    }
  }
  return run;
}

TEST(EvaluateGpu, LeavesTrainingStateUnchangedAndMatchesTheCpuEngine) {
  const std::string path = AdditionTokenFile("gpu-validation", 99, 50000);
  for (int recipe = 0; recipe < 3; ++recipe) {
    SCOPED_TRACE(recipe == 0 ? "fp8 delayed" : recipe == 1 ? "fp8 current" : "bf16");
    v1::JobSpec spec = TestJobSpec(4);
    spec.set_steps(6);
    if (recipe == 1) spec.mutable_fp8()->mutable_current();
    if (recipe == 2) spec.mutable_fp8()->set_disabled(true);
    v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
    v->set_token_file(path);
    v->set_eval_interval_steps(1);
    v->set_eval_batches(3);
    std::unique_ptr<FsdpTrainer> evaluated = GpuTrainerForTest(), plain = GpuTrainerForTest();
    ASSERT_NE(evaluated, nullptr);
    ASSERT_NE(plain, nullptr);
    const TrainedRun with = Train(*evaluated, spec, true);
    const TrainedRun without = Train(*plain, spec, false);
    ASSERT_EQ(with.losses.size(), 6u);
    ASSERT_EQ(without.losses.size(), 6u);
    EXPECT_TRUE(with.state_unchanged);
    for (int i = 0; i < 6; ++i) {
      printf("recipe %d step %d with %.8f without %.8f\n", recipe, i, with.losses[i],
             without.losses[i]);
      EXPECT_NEAR(with.losses[i], without.losses[i], 1e-3 * without.losses[i]) << i;
    }
    ASSERT_EQ(with.validation.size(), 7u);
    FsdpTrainer cpu(CreateCpuOps(), CreateGlooCommunicator);
    const TrainedRun reference = Train(cpu, spec, true);
    ASSERT_EQ(reference.validation.size(), 7u);
    for (size_t i = 0; i < with.validation.size(); ++i) {
      printf("recipe %d eval %zu gpu %.6f cpu %.6f\n", recipe, i, with.validation[i],
             reference.validation[i]);
    }
    EXPECT_NEAR(with.validation[0], reference.validation[0], 2e-3 * reference.validation[0]);
    EXPECT_NEAR(with.validation[6], reference.validation[6], 2e-2 * reference.validation[6]);
  }
}

}  // namespace
}  // namespace tessera

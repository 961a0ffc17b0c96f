// FP8 statistics across real processes: a coordinator and two CPU worker
// daemons on loopback, jobs measuring every FP8 tensor every step
// (fp8.stats_interval_steps: 1) with a saturation threshold of 5%.
//
// - a healthy job records one numerics event per step, every block linear's
//   weight, input and gradient summed over both ranks, and raises no
//   warning; `last_numerics` is its final step's record;
// - a provoked divergence, the same job with a learning rate 100x too high:
//   a WARNING event names a tensor and its block at a step before the first
//   step whose loss is non-finite or above 1.5x the first step's loss.
//   Everything compared is a step number from the job's events, so the
//   test does not depend on timing; the CPU engine is deterministic, so the
//   run is the same every time.
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/fp8_numerics.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::IsTerminal;
using testing::LocalCluster;

constexpr int kSteps = 40;
constexpr int kLayers = 2;  // SmallCpuJob's

class Fp8NumericsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  // SmallCpuJob measured every step, warning above 5% saturation.
  static v1::JobSpec Watched(const std::string& name, float lr) {
    v1::JobSpec spec = testing::SmallCpuJob(name, kSteps, /*seed=*/7);
    spec.mutable_optimizer()->set_lr(lr);
    spec.mutable_fp8()->set_stats_interval_steps(1);
    spec.mutable_fp8()->set_saturation_warn_fraction(0.05);
    return spec;
  }

  v1::Job RunToEnd(const v1::JobSpec& spec) {
    const std::string id = testing::SubmitOrFail(*stub_, spec).id();
    return testing::WaitForJobOrFail(
        *stub_, id, [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Seconds(180),
        [this] { return cluster_->Logs(); });
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(Fp8NumericsTest, AHealthyJobRecordsEveryTensorEveryStepAndWarnsOfNothing) {
  const v1::Job done = RunToEnd(Watched("healthy", 3e-3f));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  int records = 0;
  for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, done.id())) {
    EXPECT_FALSE(e.has_numerics_warning()) << e.numerics_warning().message();
    if (!e.has_numerics()) continue;
    const v1::Fp8Numerics& n = e.numerics();
    EXPECT_EQ(n.step(), records++);
    ASSERT_EQ(n.tensors_size(), kLayers * 4 * 3);
    for (const v1::Fp8TensorStats& t : n.tensors()) {
      // Both ranks' parts: each rank's 4 x 32 tokens, or its weight shard.
      EXPECT_GT(t.elements(), 0) << Fp8TensorName(t);
      EXPECT_GT(t.amax(), 0.f) << Fp8TensorName(t);
      EXPECT_GT(t.scale(), 0.f) << Fp8TensorName(t);
      EXPECT_EQ(t.format(), t.role() == v1::Fp8TensorStats::GRADIENT ? "e5m2" : "e4m3");
      if (t.role() == v1::Fp8TensorStats::INPUT && t.linear() == "qkv") {
        EXPECT_EQ(t.elements(), 2 * 4 * 32 * 64) << Fp8TensorName(t);
      }
    }
  }
  EXPECT_EQ(records, kSteps);
  ASSERT_TRUE(done.has_last_numerics());
  EXPECT_EQ(done.last_numerics().step(), kSteps - 1);
}

TEST_F(Fp8NumericsTest, ALearningRateFarTooHighWarnsNamingTheTensorBeforeTheLossDiverges) {
  const v1::Job done = RunToEnd(Watched("diverging", 100 * 3e-3f));
  ASSERT_TRUE(IsTerminal(done.state())) << done.reason();
  std::optional<float> first_loss;
  std::optional<int> diverged_at, warned_at;
  std::string warning;
  for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, done.id())) {
    if (e.has_step()) {
      const float loss = e.step().loss();
      if (!first_loss) first_loss = loss;
      if (!diverged_at && (!std::isfinite(loss) || loss > 1.5f * *first_loss)) {
        diverged_at = e.step().step();
      }
    }
    if (e.has_numerics_warning() && !warned_at) {
      const v1::Fp8NumericsWarning& w = e.numerics_warning();
      warned_at = w.step();
      warning = w.message();
      EXPECT_EQ(w.severity(), v1::WARNING);
      // The message names the block and tensor, the fraction and the threshold.
      EXPECT_TRUE(absl::StrContains(w.message(), Fp8TensorName(w.tensor()))) << w.message();
      EXPECT_TRUE(absl::StrContains(w.message(), "threshold")) << w.message();
      EXPECT_GT(w.fraction(), w.threshold());
    }
  }
  ASSERT_TRUE(diverged_at.has_value()) << "the loss never diverged: the test provokes nothing";
  ASSERT_TRUE(warned_at.has_value()) << "no warning before step " << *diverged_at;
  EXPECT_LT(*warned_at, *diverged_at) << warning;
  std::cerr << "first warning at step " << *warned_at << " (" << warning
            << "); loss diverged at step " << *diverged_at << "\n";
}

}  // namespace
}  // namespace tessera

// The bf16 shadow loss (fp8.shadow_interval_steps) across real processes: a
// coordinator, two CPU worker daemons and the `tessera` CLI, which submits
// the jobs from JSON job files and watches them.
//
// - A two-rank job with the shadow every 4 steps runs to the end; steps 4,
//   8 and 12 carry the FP8 and bf16 losses on the held-out batch and their
//   gap, the other steps none, and every step's loss is bit-identical to the
//   same job without the shadow.
// - With a generous fp8.shadow_gap_warn no step warns; with a tiny one each
//   shadow step's record carries the warning, and `tessera watch` prints
//   the shadow line and the WARNING under the step; rank 0's log carries
//   the shadow line (INFO) or the warning (WARNING).
// - A job asking for the shadow with fp8.disabled is refused at submit,
//   naming fp8.shadow_interval_steps.
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/coordinator_calls.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::BinaryPath;
using testing::LocalCluster;
using testing::RunCommand;

constexpr int kSteps = 12;
constexpr int kInterval = 4;

class ShadowLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("shadow-loss");
    auto cluster = LocalCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  v1::JobSpec Job(const std::string& name, int interval, float gap_warn) {
    v1::JobSpec spec = testing::SmallCpuJob(name, kSteps, /*seed=*/33, /*checkpoint_dir=*/"");
    spec.mutable_fp8()->set_shadow_interval_steps(interval);
    spec.mutable_fp8()->set_shadow_gap_warn(gap_warn);
    return spec;
  }

  // Submits through the CLI, as a JSON job file: its output, and the job id
  // when it was accepted (else empty).
  std::pair<std::string, std::string> Submit(const v1::JobSpec& spec, const std::string& name) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json, options).ok());
    const std::string path = absl::StrCat(dir_, "/", name, ".json");
    std::ofstream(path) << json;
    auto submitted = Cli({"submit", path});
    const size_t at = submitted.output.find("submitted ");
    if (submitted.exit_code != 0 || at == std::string::npos) return {submitted.output, ""};
    const size_t end = submitted.output.find(' ', at + 10);
    return {submitted.output, submitted.output.substr(at + 10, end - at - 10)};
  }

  testing::CommandResult Cli(std::vector<std::string> args) {
    args.push_back(absl::StrCat("--coordinator=", cluster_->address()));
    return RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(60));
  }

  // Runs the job to its end; per step, its metrics.
  std::map<int, v1::StepMetrics> Run(const v1::JobSpec& spec, const std::string& name,
                                     std::string* id_out = nullptr) {
    auto [output, id] = Submit(spec, name);
    EXPECT_FALSE(id.empty()) << output;
    if (id.empty()) return {};
    const v1::Job done = testing::WaitForJobOrFail(
        *stub_, id, [](const v1::Job& j) { return testing::IsTerminal(j.state()); },
        absl::Seconds(120), [&] { return cluster_->Logs(); });
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << cluster_->Logs();
    std::map<int, v1::StepMetrics> steps;
    for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, id)) {
      if (e.has_step()) steps[e.step().step()] = e.step();
    }
    if (id_out != nullptr) *id_out = id;
    return steps;
  }

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(ShadowLossTest, StepsCarryTheGapTrainingIsUnchangedAndATinyThresholdWarns) {
  const std::map<int, v1::StepMetrics> plain = Run(Job("plain", 0, 0.f), "plain");
  ASSERT_EQ(plain.size(), static_cast<size_t>(kSteps));
  std::string quiet_id;
  const std::map<int, v1::StepMetrics> quiet =
      Run(Job("quiet", kInterval, /*gap_warn=*/50.f), "quiet", &quiet_id);
  ASSERT_EQ(quiet.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, m] : quiet) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    EXPECT_EQ(m.loss(), plain.at(step).loss());
    EXPECT_EQ(m.grad_norm(), plain.at(step).grad_norm());
    EXPECT_FALSE(plain.at(step).has_shadow());
    ASSERT_EQ(m.has_shadow(), (step + 1) % kInterval == 0);
    if (!m.has_shadow()) continue;
    EXPECT_GT(m.shadow().fp8_loss(), 0.f);
    EXPECT_GT(m.shadow().bf16_loss(), 0.f);
    EXPECT_NE(m.shadow().fp8_loss(), m.shadow().bf16_loss());
    EXPECT_EQ(m.shadow().gap(), m.shadow().fp8_loss() - m.shadow().bf16_loss());
    EXPECT_GT(m.shadow().tokens(), 0);
    EXPECT_GT(m.shadow().time_s(), 0.0);
    EXPECT_EQ(m.shadow().warning(), "");
  }

  std::string id;
  const std::map<int, v1::StepMetrics> loud =
      Run(Job("loud", kInterval, /*gap_warn=*/1e-7f), "loud", &id);
  ASSERT_EQ(loud.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, m] : loud) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    EXPECT_EQ(m.loss(), plain.at(step).loss());
    ASSERT_EQ(m.has_shadow(), (step + 1) % kInterval == 0);
    if (!m.has_shadow()) continue;
    // The same weights and batch as the quiet job: the same losses.
    EXPECT_EQ(m.shadow().fp8_loss(), quiet.at(step).shadow().fp8_loss());
    EXPECT_EQ(m.shadow().bf16_loss(), quiet.at(step).shadow().bf16_loss());
    EXPECT_TRUE(absl::StrContains(m.shadow().warning(), "fp8.shadow_gap_warn"))
        << m.shadow().warning();
  }
  const testing::CommandResult watched = Cli({"watch", id});
  EXPECT_EQ(watched.exit_code, 0) << watched.output;
  for (int step = kInterval; step <= kSteps; step += kInterval) {
    EXPECT_TRUE(absl::StrContains(watched.output, absl::StrCat("after step ", step, " (held-out")))
        << watched.output;
  }
  EXPECT_TRUE(absl::StrContains(watched.output, "shadow: fp8 ")) << watched.output;
  EXPECT_TRUE(absl::StrContains(watched.output, "WARNING: FP8 loss")) << watched.output;
  // Rank 0's log says it too, as a warning; the quiet job's as information.
  const testing::CommandResult logs = Cli({"logs", id});
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_TRUE(absl::StrContains(logs.output, "WARNING job=" + id + " rank=0 step=3 FP8 loss"))
      << logs.output;
  const testing::CommandResult quiet_logs = Cli({"logs", quiet_id});
  EXPECT_TRUE(absl::StrContains(quiet_logs.output,
                                "INFO job=" + quiet_id + " rank=0 step=3 shadow loss: fp8 "))
      << quiet_logs.output;

  // No FP8, nothing to shadow: refused at submit, naming the field.
  v1::JobSpec bf16 = Job("bf16", kInterval, 0.f);
  bf16.mutable_fp8()->set_disabled(true);
  auto [output, refused] = Submit(bf16, "bf16");
  EXPECT_TRUE(refused.empty()) << output;
  EXPECT_TRUE(absl::StrContains(output, "fp8.shadow_interval_steps")) << output;
}

}  // namespace
}  // namespace tessera

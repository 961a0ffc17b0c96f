// data.document_masking across real processes: a coordinator, two CPU
// worker daemons and the `tessera` CLI, which writes the token files from
// text with one document per blank-line-separated record (`tessera data
// text --documents blank-lines`), submits the jobs and reports refusals.
//
// - A job with document masking runs to the end over training and
//   validation files with document indexes; each step scores fewer targets
//   than the micro-batches hold (the ones that begin a document are
//   ignored), and its losses differ from the same job without masking.
// - The same job with a worker killed (SIGKILL) mid-run resumes from its
//   checkpoint on a replacement worker, and every step's loss and the last
//   validation loss are bit-identical to the unbroken run's.
// - Specs that cannot be masked are refused at submit, naming
//   data.document_masking and the reason: synthetic data, a training file
//   without a document index, a validation file without one.
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

constexpr int kSteps = 30;
constexpr int kTargetsPerStep = 2 * 4 * 32;  // 2 ranks x micro-batch 4 x SmallCpuJob's seq_len

const std::vector<std::string> kFastFailureFlags = {
    "--worker_timeout_ms=2000", "--heartbeat_interval_ms=200", "--collective_timeout_ms=3000"};

// Records of 10..70 bytes of lowercase lines, separated by blank lines,
// different for each seed: with 32-token sequences most hold a boundary.
void WriteRecords(const std::string& path, int records, uint64_t seed) {
  std::string text;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&x](int n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((x >> 33) % n);
  };
  for (int r = 0; r < records; ++r) {
    const int bytes = 10 + next(61);
    for (int i = 0; i < bytes; ++i) {
      const int c = next(28);
      text.push_back(c < 26 ? static_cast<char>('a' + c) : c == 26 ? ' ' : '\n');
    }
    text += "\n\n";
  }
  std::ofstream(path, std::ios::binary) << text;
}

class DocumentMaskingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("document-masking");
    auto cluster = LocalCluster::Start(2, kFastFailureFlags);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  // A token file made by the CLI from `records` records of text.
  std::string RecordsFile(const std::string& name, int records, uint64_t seed) {
    const std::string text = absl::StrCat(dir_, "/", name, ".txt");
    WriteRecords(text, records, seed);
    const std::string out = absl::StrCat(dir_, "/", name, ".tok");
    auto made = RunCommand(BinaryPath("client/tessera"),
                           {"data", "text", "--documents", "blank-lines", "--out", out, text},
                           absl::Seconds(30));
    EXPECT_EQ(made.exit_code, 0) << made.output;
    return out;
  }

  v1::JobSpec MaskedJob(const std::string& name, bool masking) {
    v1::JobSpec spec = testing::SmallCpuJob(name, kSteps, /*seed=*/21,
                                            absl::StrCat(dir_, "/ckpt-", name));
    v1::DataConfig* data = spec.mutable_data();
    data->set_token_file(train_);
    data->set_document_masking(masking);
    v1::ValidationConfig* validation = data->mutable_validation();
    validation->set_token_file(validation_);
    validation->set_eval_interval_steps(10);
    validation->set_eval_batches(2);
    spec.set_max_restarts(1);
    return spec;
  }

  // Submits through the CLI, as a JSON job file. The CLI's output, and
  // the job id when it was accepted (else empty).
  std::pair<std::string, std::string> Submit(const v1::JobSpec& spec, const std::string& name) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json, options).ok());
    const std::string path = absl::StrCat(dir_, "/", name, ".json");
    std::ofstream(path) << json;
    auto submitted =
        RunCommand(BinaryPath("client/tessera"),
                   {"submit", path, absl::StrCat("--coordinator=", cluster_->address())},
                   absl::Seconds(30));
    const size_t at = submitted.output.find("submitted ");
    if (submitted.exit_code != 0 || at == std::string::npos) return {submitted.output, ""};
    const size_t end = submitted.output.find(' ', at + 10);
    return {submitted.output, submitted.output.substr(at + 10, end - at - 10)};
  }

  std::string SubmitOrFail(const v1::JobSpec& spec, const std::string& name) {
    auto [output, id] = Submit(spec, name);
    EXPECT_FALSE(id.empty()) << output;
    return id;
  }

  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  absl::Duration timeout) {
    return testing::WaitForJobOrFail(*stub_, id, done, timeout, [&] { return cluster_->Logs(); });
  }

  v1::Job WaitEnded(const std::string& id) {
    return WaitFor(id, [](const v1::Job& j) { return testing::IsTerminal(j.state()); },
                   absl::Seconds(120));
  }

  // Per step, the latest attempt's metrics.
  std::map<int, v1::StepMetrics> LatestSteps(const std::string& id) {
    std::map<int, v1::StepMetrics> latest;
    for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, id)) {
      if (!e.has_step()) continue;
      auto it = latest.find(e.step().step());
      if (it == latest.end() || e.step().attempt() >= it->second.attempt()) {
        latest[e.step().step()] = e.step();
      }
    }
    return latest;
  }

  void ExpectRefused(const v1::JobSpec& spec, const std::string& name,
                     const std::string& message) {
    auto [output, id] = Submit(spec, name);
    EXPECT_TRUE(id.empty()) << "accepted: " << output;
    EXPECT_TRUE(absl::StrContains(output, message)) << output;
  }

  std::string dir_, train_, validation_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(DocumentMaskingTest, RunsResumesBitIdenticallyAndRefusesDataWithoutDocuments) {
  train_ = RecordsFile("train", 600, 1);
  validation_ = RecordsFile("validation", 100, 2);

  // The unbroken masked run, and the same job without masking.
  const std::string reference = SubmitOrFail(MaskedJob("unbroken", true), "unbroken");
  const v1::Job reference_done = WaitEnded(reference);
  ASSERT_EQ(reference_done.state(), v1::SUCCEEDED) << reference_done.reason() << cluster_->Logs();
  const std::map<int, v1::StepMetrics> want = LatestSteps(reference);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  const std::string unmasked = SubmitOrFail(MaskedJob("unmasked", false), "unmasked");
  const v1::Job unmasked_done = WaitEnded(unmasked);
  ASSERT_EQ(unmasked_done.state(), v1::SUCCEEDED) << unmasked_done.reason();
  const std::map<int, v1::StepMetrics> plain = LatestSteps(unmasked);
  ASSERT_EQ(plain.size(), static_cast<size_t>(kSteps));
  int differing = 0;
  for (const auto& [step, metrics] : want) {
    // Every sequence is read whole; the targets that begin a document are not scored.
    EXPECT_LT(metrics.tokens(), kTargetsPerStep) << "step " << step;
    EXPECT_EQ(plain.at(step).tokens(), kTargetsPerStep) << "step " << step;
    differing += metrics.loss() != plain.at(step).loss();
  }
  EXPECT_EQ(differing, kSteps);
  EXPECT_NE(reference_done.last_metrics().validation().loss(),
            unmasked_done.last_metrics().validation().loss());

  // The masked job again, a worker killed with SIGKILL mid-run.
  const std::string id = SubmitOrFail(MaskedJob("restarted", true), "restarted");
  const v1::Job running =
      WaitFor(id, [](const v1::Job& j) { return j.steps_done() >= 12; }, absl::Seconds(60));
  ASSERT_EQ(running.state(), v1::RUNNING);
  ASSERT_EQ(running.worker_ids_size(), 2);
  const absl::StatusOr<int> victim = cluster_->WorkerProcess(running.worker_ids(1));
  ASSERT_TRUE(victim.ok()) << victim.status();
  cluster_->worker(*victim).Kill();
  absl::StatusOr<int> replacement = cluster_->AddWorker();
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  const v1::Job done = WaitEnded(id);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << "\n" << cluster_->Logs();
  EXPECT_EQ(done.restarts(), 1);
  const std::map<int, v1::StepMetrics> got = LatestSteps(id);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got.at(step).loss(), want.at(step).loss()) << "step " << step;
    EXPECT_EQ(got.at(step).tokens(), want.at(step).tokens()) << "step " << step;
  }
  EXPECT_EQ(done.last_metrics().validation().loss(),
            reference_done.last_metrics().validation().loss());

  // Specs that cannot be masked.
  v1::JobSpec synthetic = testing::SmallCpuJob("synthetic", kSteps, 21, "");
  synthetic.mutable_data()->set_document_masking(true);
  ExpectRefused(synthetic, "synthetic", "data.document_masking: needs token-file data");
  const std::string no_index = absl::StrCat(dir_, "/no-index.tok");
  auto made = RunCommand(BinaryPath("client/tessera"),
                         {"data", "synthetic", "--task", "addition", "--tokens", "20000", "--out",
                          no_index},
                         absl::Seconds(30));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  v1::JobSpec bad_train = MaskedJob("bad-train", true);
  bad_train.mutable_data()->set_token_file(no_index);
  ExpectRefused(bad_train, "bad-train",
                absl::StrCat("data.document_masking: data.token_file ", no_index,
                             " records no document starts"));
  v1::JobSpec bad_validation = MaskedJob("bad-validation", true);
  bad_validation.mutable_data()->mutable_validation()->set_token_file(no_index);
  ExpectRefused(bad_validation, "bad-validation",
                absl::StrCat("data.document_masking: data.validation.token_file ", no_index,
                             " records no document starts"));
}

}  // namespace
}  // namespace tessera

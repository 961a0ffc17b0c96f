// A weighted mixture of three sources across real processes: a coordinator,
// two CPU worker daemons and the `tessera` CLI, which writes the token files
// (`tessera data text`), submits the job and shows its status. The workers
// trace every training sequence they read (--data_trace_dir, here through
// TESSERA_DATA_TRACE_DIR) with its source, epoch, sequence, file and offset.
//
// - Weights 0.5 / 0.3 / 0.2 over sources of 160, 96 and 64 sequences (the
//   first a directory of two shards with tails that fill no sequence): the
//   job's 320 sequences are one epoch of each source; each source's share
//   of the tokens drawn is within 1% of its weight, no sequence repeats
//   within an epoch and none is skipped, and each sequence is read from the
//   shard and offset the documented order gives.
// - The same job with a worker killed (SIGKILL) mid-run resumes from its
//   checkpoint on a replacement worker: every sequence slot, in either
//   attempt, draws what the unbroken run drew, every step's loss is
//   bit-identical, and so are the per-source validation losses, which
//   `tessera status` lists by source.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

constexpr int kSteps = 40;
constexpr int kSeqLen = 32;  // SmallCpuJob's
constexpr int kSpan = kSeqLen + 1;
constexpr int kGlobalBatch = 8;  // 2 ranks x micro-batch 4
constexpr int kSlots = kSteps * kGlobalBatch;
const double kWeights[3] = {0.5, 0.3, 0.2};
const int kSequences[3] = {160, 96, 64};  // one epoch of each in kSlots slots

const std::vector<std::string> kFastFailureFlags = {
    "--worker_timeout_ms=2000", "--heartbeat_interval_ms=200", "--collective_timeout_ms=3000"};

// `bytes` bytes of lowercase text, different for each seed.
void WriteText(const std::string& path, int bytes, uint64_t seed) {
  std::string text;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int r = static_cast<int>((x >> 33) % 28);
    text.push_back(r < 26 ? static_cast<char>('a' + r) : r == 26 ? ' ' : '\n');
  }
  std::ofstream(path, std::ios::binary) << text;
}

// One line of a worker's data trace.
struct Draw {
  int64_t step = 0, slot = 0, epoch = 0, sequence = 0, offset = 0;
  int rank = 0, source = 0;
  std::string file;
  bool operator==(const Draw& o) const {
    return step == o.step && slot == o.slot && epoch == o.epoch && sequence == o.sequence &&
           offset == o.offset && rank == o.rank && source == o.source && file == o.file;
  }
};

// Every complete line of the traces in `dir`, in file order per rank. A
// line cut short by a kill (and whatever was appended to it) is skipped.
std::vector<Draw> ReadTraces(const std::string& dir) {
  std::vector<Draw> draws;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(absl::StrCat(dir, "/data-trace-rank-", rank, ".txt"));
    std::string line;
    while (std::getline(in, line)) {
      const std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() != 16 || f[0] != "step" || f[2] != "rank" || f[4] != "slot" ||
          f[6] != "source" || f[8] != "epoch" || f[10] != "sequence" || f[12] != "file" ||
          f[14] != "offset") {
        continue;
      }
      Draw d;
      d.step = std::stoll(f[1]);
      d.rank = std::stoi(f[3]);
      d.slot = std::stoll(f[5]);
      d.source = std::stoi(f[7]);
      d.epoch = std::stoll(f[9]);
      d.sequence = std::stoll(f[11]);
      d.file = f[13];
      d.offset = std::stoll(f[15]);
      draws.push_back(d);
    }
  }
  return draws;
}

class MixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("mixture");
    trace_dir_ = dir_ + "/trace";
    ASSERT_EQ(::mkdir(trace_dir_.c_str(), 0755), 0);
    // The workers the cluster starts inherit it.
    ASSERT_EQ(::setenv("TESSERA_DATA_TRACE_DIR", trace_dir_.c_str(), 1), 0);
    auto cluster = LocalCluster::Start(2, kFastFailureFlags);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  // A token file of `sequences` whole sequences plus `tail` tokens, made
  // from text by the CLI.
  std::string TokenFile(const std::string& name, int sequences, int tail, uint64_t seed) {
    // The text lies outside the shard directory: every file in it must be
    // a token file.
    const std::string text = absl::StrCat(dir_, "/text-", seed, ".txt");
    WriteText(text, sequences * kSpan + tail, seed);
    const std::string out = absl::StrCat(dir_, "/", name);
    auto made = RunCommand(BinaryPath("client/tessera"), {"data", "text", "--out", out, text},
                           absl::Seconds(30));
    EXPECT_EQ(made.exit_code, 0) << made.output;
    return out;
  }

  void MakeSources() {
    web_ = dir_ + "/web";
    ASSERT_EQ(::mkdir(web_.c_str(), 0755), 0);
    web_first_ = TokenFile("web/part-00.tok", 100, 10, 1);
    web_second_ = TokenFile("web/part-01.tok", 60, kSpan - 1, 2);
    code_ = TokenFile("code.tok", kSequences[1], 20, 3);
    books_ = TokenFile("books.tok", kSequences[2], 0, 4);
    val_code_ = TokenFile("val-code.tok", 8, 0, 5);
    val_books_ = TokenFile("val-books.tok", 8, 0, 6);
  }

  v1::JobSpec MixtureJob(const std::string& checkpoint_dir) {
    v1::JobSpec spec = testing::SmallCpuJob("mixture", kSteps, /*seed=*/11, checkpoint_dir);
    v1::DataConfig* data = spec.mutable_data();
    data->clear_synthetic();
    const std::string paths[3] = {web_, code_, books_};
    for (int i = 0; i < 3; ++i) {
      v1::DataSource* source = data->add_sources();
      source->set_path(paths[i]);
      source->set_weight(kWeights[i]);
    }
    v1::ValidationConfig* validation = data->mutable_validation();
    validation->add_sources()->set_path(val_code_);
    validation->add_sources()->set_path(val_books_);
    validation->set_eval_interval_steps(20);
    validation->set_eval_batches(1);
    spec.set_max_restarts(1);
    return spec;
  }

  // Submits through the CLI, as a JSON job file; returns the job id.
  std::string SubmitWithCli(const v1::JobSpec& spec, const std::string& name) {
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
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
    const size_t at = submitted.output.find("submitted ");
    if (at == std::string::npos) {
      ADD_FAILURE() << submitted.output;
      return "";
    }
    const size_t end = submitted.output.find(' ', at + 10);
    return submitted.output.substr(at + 10, end - at - 10);
  }

  v1::Job Get(const std::string& id) { return testing::GetJobOrFail(*stub_, id); }

  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  absl::Duration timeout) {
    return testing::WaitForJobOrFail(*stub_, id, done, timeout, [&] { return cluster_->Logs(); });
  }

  v1::Job WaitEnded(const std::string& id) {
    return WaitFor(id, [](const v1::Job& j) { return testing::IsTerminal(j.state()); },
                   absl::Seconds(120));
  }

  // Per step, the loss of the latest attempt's record.
  std::map<int, float> LatestLosses(const std::string& id) {
    std::map<int, std::pair<int, float>> latest;
    for (const v1::JobEvent& e : testing::JobEventsOrFail(*stub_, id)) {
      if (!e.has_step()) continue;
      auto it = latest.find(e.step().step());
      if (it == latest.end() || e.step().attempt() >= it->second.first) {
        latest[e.step().step()] = {e.step().attempt(), e.step().loss()};
      }
    }
    std::map<int, float> losses;
    for (const auto& [step, entry] : latest) losses[step] = entry.second;
    return losses;
  }

  // Moves the traces written so far aside, so the next job starts fresh.
  std::string TakeTraces(const std::string& name) {
    const std::string to = absl::StrCat(dir_, "/", name);
    EXPECT_EQ(std::rename(trace_dir_.c_str(), to.c_str()), 0);
    EXPECT_EQ(::mkdir(trace_dir_.c_str(), 0755), 0);
    return to;
  }

  std::string dir_, trace_dir_;
  std::string web_, web_first_, web_second_, code_, books_, val_code_, val_books_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(MixtureTest, SharesFollowTheWeightsEachEpochOnceAndAKilledJobResumesTheExactOrder) {
  MakeSources();

  // The unbroken run.
  const std::string reference = SubmitWithCli(MixtureJob(dir_ + "/ckpt-unbroken"), "unbroken");
  const v1::Job reference_done = WaitEnded(reference);
  ASSERT_EQ(reference_done.state(), v1::SUCCEEDED) << reference_done.reason() << cluster_->Logs();
  const std::map<int, float> want_losses = LatestLosses(reference);
  ASSERT_EQ(want_losses.size(), static_cast<size_t>(kSteps));
  const std::vector<Draw> unbroken = ReadTraces(TakeTraces("trace-unbroken"));
  ASSERT_EQ(unbroken.size(), static_cast<size_t>(kSlots));

  std::map<int64_t, Draw> by_slot;
  int drawn[3] = {0, 0, 0};
  std::set<std::tuple<int, int64_t, int64_t>> seen;  // (source, epoch, sequence)
  std::map<int, std::set<int64_t>> epoch0;
  for (const Draw& d : unbroken) {
    ASSERT_TRUE(by_slot.emplace(d.slot, d).second) << "slot " << d.slot << " drawn twice";
    ASSERT_GE(d.source, 0);
    ASSERT_LT(d.source, 3);
    EXPECT_EQ(d.slot / kGlobalBatch, d.step);
    EXPECT_EQ(d.slot % kGlobalBatch / 4, d.rank);
    ++drawn[d.source];
    EXPECT_TRUE(seen.insert({d.source, d.epoch, d.sequence}).second)
        << "source " << d.source << " sequence " << d.sequence << " repeated in epoch "
        << d.epoch;
    EXPECT_LT(d.sequence, kSequences[d.source]);
    if (d.epoch == 0) epoch0[d.source].insert(d.sequence);
    // The directory's shards in name order, whole sequences back to back.
    if (d.source == 0) {
      const bool first = d.sequence < 100;
      EXPECT_EQ(d.file, first ? web_ + "/part-00.tok" : web_ + "/part-01.tok");
      EXPECT_EQ(d.offset, (first ? d.sequence : d.sequence - 100) * kSpan);
    } else {
      EXPECT_EQ(d.file, d.source == 1 ? code_ : books_);
      EXPECT_EQ(d.offset, d.sequence * kSpan);
    }
  }
  for (int i = 0; i < 3; ++i) {
    // Every sequence carries seq_len input tokens, so sequence shares are token shares.
    const double share = static_cast<double>(drawn[i]) * kSeqLen / (kSlots * kSeqLen);
    std::printf("source %d: %d of %d sequences, token share %.4f (weight %.1f)\n", i, drawn[i],
                kSlots, share, kWeights[i]);
    EXPECT_NEAR(share, kWeights[i], 0.01) << "source " << i;
    // The 320 slots are exactly one epoch of each source: every sequence
    // drawn, none skipped.
    EXPECT_EQ(static_cast<int>(epoch0[i].size()), kSequences[i]) << "source " << i;
  }

  // The same job, a worker killed with SIGKILL mid-run.
  const std::string id = SubmitWithCli(MixtureJob(dir_ + "/ckpt-restarted"), "restarted");
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

  // Every slot, in both attempts, drew what the unbroken run drew.
  const std::vector<Draw> restarted = ReadTraces(TakeTraces("trace-restarted"));
  std::map<int64_t, int> times;
  for (const Draw& d : restarted) {
    ++times[d.slot];
    ASSERT_TRUE(by_slot.count(d.slot)) << "slot " << d.slot;
    EXPECT_TRUE(d == by_slot.at(d.slot)) << "slot " << d.slot << " drew source " << d.source
                                         << " sequence " << d.sequence;
  }
  EXPECT_EQ(times.size(), static_cast<size_t>(kSlots));
  int again = 0;
  for (const auto& [slot, n] : times) again += n > 1;
  EXPECT_GT(again, 0);  // the steps after the checkpoint were drawn again

  const std::map<int, float> got_losses = LatestLosses(id);
  ASSERT_EQ(got_losses.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(got_losses.at(step), want_losses.at(step)) << "step " << step;
  }

  // The last step's validation, by source: the same bits, shown by status.
  const v1::ValidationLoss& want_val = reference_done.last_metrics().validation();
  const v1::ValidationLoss& got_val = done.last_metrics().validation();
  ASSERT_EQ(got_val.sources_size(), 2);
  ASSERT_EQ(want_val.sources_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got_val.sources(i).path(), i == 0 ? val_code_ : val_books_);
    EXPECT_EQ(got_val.sources(i).loss(), want_val.sources(i).loss());
    EXPECT_EQ(got_val.sources(i).tokens(), 4 * 2 * kSeqLen);  // one micro-batch per rank
  }
  auto status = RunCommand(BinaryPath("client/tessera"),
                           {"status", id, absl::StrCat("--coordinator=", cluster_->address())},
                           absl::Seconds(30));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, absl::StrCat("  source  ", val_code_, "  loss ")))
      << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, absl::StrCat("  source  ", val_books_, "  loss ")))
      << status.output;
}

}  // namespace
}  // namespace tessera

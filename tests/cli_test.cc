// The `tessera` CLI against a real coordinator and workers: submit a job file
// and watch it to completion, list jobs as JSON, train a grouped-query
// attention model (n_kv_heads < n_heads) end to end on CPU workers, refuse a
// CUDA job whose head dim the CUDA engine lacks, fail cleanly (one line,
// non-zero exit) when the coordinator cannot be reached, refuse hostile job
// files with exit code 2 (they once crashed the CLI), list more jobs than
// one page holds, delete a finished job, and print every rank's log lines of
// a finished job (`tessera logs`), and export a job's checkpoint as a
// Hugging Face directory (`tessera export`) that a new job starts from
// (`model.init_from`).
#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace tessera {
namespace {

using testing::BinaryPath;
using testing::LocalCluster;
using testing::RunCommand;

constexpr char kTinyJobYaml[] = R"(name: cli-tiny
model:
  vocab_size: 256
  d_model: 32
  n_layers: 1
  n_heads: 2
  ffn_dim: 64
  seq_len: 16
data:
  synthetic:
    task: ADDITION
  micro_batch_size: 2
optimizer:
  lr: 0.003
  warmup_steps: 2
world_size: 2
device_kind: CPU
steps: 8
seed: 3
)";

TEST(CliTest, SubmitWatchAndListJobs) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::string job_file = testing::MakeTempDir("cli") + "/job.yaml";
  FILE* f = fopen(job_file.c_str(), "w");
  fputs(kTinyJobYaml, f);
  fclose(f);

  auto submit = RunCommand(BinaryPath("client/tessera"),
                           {"submit", job_file, "--watch",
                            absl::StrCat("--coordinator=", (*cluster)->address())},
                           absl::Seconds(120));
  EXPECT_EQ(submit.exit_code, 0) << submit.output << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(submit.output, "SUCCEEDED")) << submit.output;

  auto jobs = RunCommand(BinaryPath("client/tessera"),
                         {"jobs", "--json", absl::StrCat("--coordinator=", (*cluster)->address())},
                         absl::Seconds(30));
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_TRUE(absl::StrContains(jobs.output, "cli-tiny")) << jobs.output;
  EXPECT_TRUE(absl::StrContains(jobs.output, "SUCCEEDED")) << jobs.output;
}

// The tiny job with 2 layers and 4 query heads (head dim 8) sharing 2 key/value heads.
std::string GqaJobYaml() {
  return absl::StrReplaceAll(kTinyJobYaml, {{"name: cli-tiny", "name: cli-gqa"},
                                            {"n_layers: 1", "n_layers: 2"},
                                            {"n_heads: 2", "n_heads: 4\n  n_kv_heads: 2"},
                                            {"seed: 3", "seed: 4"}});
}

std::string WriteJobFile(const std::string& name, const std::string& text) {
  std::string path = testing::MakeTempDir("cli") + "/" + name;
  FILE* f = fopen(path.c_str(), "w");
  fputs(text.c_str(), f);
  fclose(f);
  return path;
}

TEST(CliTest, GroupedQueryAttentionJobSucceedsOnCpuWorkers) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string coordinator = absl::StrCat("--coordinator=", (*cluster)->address());
  const std::string job_file = WriteJobFile("gqa.yaml", GqaJobYaml());
  auto submit = RunCommand(BinaryPath("client/tessera"),
                           {"submit", job_file, "--watch", coordinator}, absl::Seconds(120));
  EXPECT_EQ(submit.exit_code, 0) << submit.output << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(submit.output, "SUCCEEDED")) << submit.output;

  // The coordinator kept the field (JSON with the proto field names).
  auto jobs = RunCommand(BinaryPath("client/tessera"), {"jobs", "--json", coordinator},
                         absl::Seconds(30));
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_TRUE(absl::StrContains(jobs.output, "\"n_kv_heads\":2")) << jobs.output;

  // Status shows where the workers' last step went, timed by the workers.
  auto status = RunCommand(BinaryPath("client/tessera"), {"status", "job-1", coordinator},
                           absl::Seconds(30));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, "phases    forward ")) << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, "collectives ")) << status.output;
  EXPECT_FALSE(absl::StrContains(status.output, "mfu")) << status.output;  // CPU workers

  // The same model on CUDA workers: head dim 8 is refused at submit time.
  std::string cuda = GqaJobYaml();
  cuda.replace(cuda.find("device_kind: CPU"), 16, "device_kind: CUDA");
  auto refused = RunCommand(BinaryPath("client/tessera"),
                            {"submit", WriteJobFile("gqa-cuda.yaml", cuda), coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "INVALID_ARGUMENT")) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "model.n_heads")) << refused.output;
}

TEST(CliTest, UnreachableCoordinatorGivesOneLineAndNonZeroExit) {
  int port = testing::PickFreePort();
  auto result = RunCommand(BinaryPath("client/tessera"),
                           {"jobs", absl::StrCat("--coordinator=127.0.0.1:", port)},
                           absl::Seconds(60));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.exit_code, -1) << "CLI hung";
  std::vector<std::string> lines =
      absl::StrSplit(result.output, '\n', absl::SkipWhitespace());
  EXPECT_EQ(lines.size(), 1u) << result.output;
  EXPECT_TRUE(absl::StrContains(result.output, absl::StrCat(port))) << result.output;
}

TEST(CliTest, BadSpecPrintsTheField) {
  auto cluster = LocalCluster::Start(0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::string job_file = testing::MakeTempDir("cli") + "/bad.yaml";
  std::string bad = kTinyJobYaml;
  bad.replace(bad.find("steps: 8"), 8, "steps: 0");
  FILE* f = fopen(job_file.c_str(), "w");
  fputs(bad.c_str(), f);
  fclose(f);
  auto result = RunCommand(BinaryPath("client/tessera"),
                           {"submit", job_file, absl::StrCat("--coordinator=", (*cluster)->address())},
                           absl::Seconds(30));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(result.output, "INVALID_ARGUMENT")) << result.output;
  EXPECT_TRUE(absl::StrContains(result.output, "steps")) << result.output;
}

TEST(CliTest, HostileJobFilesExitWithUsageErrorNotASignal) {
  std::string deep = "{\"name\": ";
  for (int i = 0; i < 100000; ++i) deep += "{\"a\": ";
  deep += "1" + std::string(100000, '}') + "}";
  const std::string number(10 << 20, '7');
  const std::vector<std::pair<std::string, std::string>> files = {
      {"deep.json", deep},
      {"number.yaml", "name: " + number + "\n"},
      {"number.json", "{\"name\": " + number + "}"},
      {"typo.yaml", "name: x\nmodel:\n  n_head: 4\n"},
  };
  for (const auto& [name, text] : files) {
    const std::string path = WriteJobFile(name, text);
    auto result = RunCommand(BinaryPath("client/tessera"), {"submit", path, "--dry-run"},
                             absl::Seconds(30));
    EXPECT_EQ(result.exit_code, 2) << name << ": " << result.output;
    EXPECT_TRUE(absl::StartsWith(result.output, "tessera: " + path + ": ")) << result.output;
  }
  auto typo = RunCommand(BinaryPath("client/tessera"),
                         {"submit", WriteJobFile("typo2.yaml", "name: x\nmodel:\n  n_head: 4\n"),
                          "--dry-run"},
                         absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(typo.output, "line 3: model.n_head: unknown field; did you mean "
                                             "n_heads?"))
      << typo.output;
}

// `tessera logs` reads every rank's lines through the coordinator, in one
// structured format, after the job has ended; --rank narrows it and
// --follow returns once the ended job's lines are printed.
TEST(CliTest, LogsShowEveryRankOfAFinishedJob) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string coordinator = absl::StrCat("--coordinator=", (*cluster)->address());
  auto submit = RunCommand(BinaryPath("client/tessera"),
                           {"submit", WriteJobFile("logs.yaml", kTinyJobYaml), "--watch",
                            coordinator},
                           absl::Seconds(120));
  ASSERT_EQ(submit.exit_code, 0) << submit.output << (*cluster)->Logs();
  auto logs = RunCommand(BinaryPath("client/tessera"), {"logs", "job-1", coordinator},
                         absl::Seconds(60));
  ASSERT_EQ(logs.exit_code, 0) << logs.output;
  std::vector<std::string> lines = absl::StrSplit(logs.output, '\n', absl::SkipEmpty());
  int per_rank[2] = {0, 0};
  for (const std::string& line : lines) {
    // 2026-11-23T23:51:07.123Z INFO job=job-1 rank=R step=S message
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    ASSERT_GE(f.size(), 6u) << line;
    EXPECT_EQ(f[0].size(), 24u) << line;
    EXPECT_TRUE(f[1] == "INFO" || f[1] == "WARNING" || f[1] == "ERROR") << line;
    EXPECT_EQ(f[2], "job=job-1") << line;
    ASSERT_TRUE(f[3] == "rank=0" || f[3] == "rank=1") << line;
    EXPECT_TRUE(absl::StartsWith(f[4], "step=")) << line;
    ++per_rank[f[3] == "rank=1"];
  }
  EXPECT_GE(per_rank[0], 3) << logs.output;  // set up, joined, first and last steps
  EXPECT_GE(per_rank[1], 3) << logs.output;
  EXPECT_TRUE(absl::StrContains(logs.output, "rank=1 step=- set up rank 1 of 2")) << logs.output;
  EXPECT_TRUE(absl::StrContains(logs.output, "rank=0 step=7 loss ")) << logs.output;

  auto one = RunCommand(BinaryPath("client/tessera"),
                        {"logs", "job-1", "--rank", "1", "--follow", coordinator},
                        absl::Seconds(60));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_FALSE(absl::StrContains(one.output, "rank=0")) << one.output;
  EXPECT_EQ(static_cast<int>(std::count(one.output.begin(), one.output.end(), '\n')),
            per_rank[1]);

  auto bad_rank = RunCommand(BinaryPath("client/tessera"),
                             {"logs", "job-1", "--rank", "2", coordinator}, absl::Seconds(30));
  EXPECT_EQ(bad_rank.exit_code, 1) << bad_rank.output;
  EXPECT_TRUE(absl::StrContains(bad_rank.output, "INVALID_ARGUMENT")) << bad_rank.output;
  auto unknown = RunCommand(BinaryPath("client/tessera"), {"logs", "job-9", coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(absl::StrContains(unknown.output, "NOT_FOUND")) << unknown.output;
}

// `tessera export`: a job's committed checkpoint as a Hugging Face
// directory, from the checkpoint files alone (the cluster is stopped first).
TEST(CliTest, ExportWritesAHuggingFaceDirectoryFromTheCheckpoint) {
  const std::string dir = testing::MakeTempDir("cli-export");
  const std::string job_file = WriteJobFile(
      "export.yaml", absl::StrCat(kTinyJobYaml, "checkpoint:\n  dir: ", dir,
                                  "/ckpt\n  interval_steps: 4\n"));
  {
    auto cluster = LocalCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto submit = RunCommand(BinaryPath("client/tessera"),
                             {"submit", job_file, "--watch",
                              absl::StrCat("--coordinator=", (*cluster)->address())},
                             absl::Seconds(120));
    ASSERT_EQ(submit.exit_code, 0) << submit.output << (*cluster)->Logs();
  }
  auto exported = RunCommand(BinaryPath("client/tessera"),
                             {"export", dir + "/ckpt", "--job", job_file, "--out", dir + "/hf",
                              "--dtype", "fp32"},
                             absl::Seconds(60));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(absl::StrContains(exported.output, "exported step 8: 12 tensors")) << exported.output;
  struct stat st;
  EXPECT_EQ(stat((dir + "/hf/model.safetensors").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 0);
  EXPECT_EQ(stat((dir + "/hf/config.json").c_str(), &st), 0);

  auto bad_dtype = RunCommand(BinaryPath("client/tessera"),
                              {"export", dir + "/ckpt", "--job", job_file, "--out", dir + "/x",
                               "--dtype", "fp16"},
                              absl::Seconds(30));
  EXPECT_EQ(bad_dtype.exit_code, 2) << bad_dtype.output;
  const std::string other = WriteJobFile(
      "other.yaml", absl::StrReplaceAll(kTinyJobYaml, {{"ffn_dim: 64", "ffn_dim: 96"}}));
  auto wrong_model = RunCommand(BinaryPath("client/tessera"),
                                {"export", dir + "/ckpt", "--job", other, "--out", dir + "/y"},
                                absl::Seconds(30));
  EXPECT_EQ(wrong_model.exit_code, 1) << wrong_model.output;
  EXPECT_TRUE(absl::StrContains(wrong_model.output, "FAILED_PRECONDITION")) << wrong_model.output;
  // A job file no coordinator would accept is refused by its field, before
  // the checkpoint is read.
  const std::string invalid = WriteJobFile(
      "invalid.yaml", absl::StrReplaceAll(kTinyJobYaml, {{"n_heads: 2", "n_heads: 3"}}));
  auto invalid_job = RunCommand(BinaryPath("client/tessera"),
                                {"export", dir + "/ckpt", "--job", invalid, "--out", dir + "/z"},
                                absl::Seconds(30));
  EXPECT_EQ(invalid_job.exit_code, 2) << invalid_job.output;
  EXPECT_TRUE(absl::StrContains(invalid_job.output, "model.d_model")) << invalid_job.output;

  // The export starts a new job (model.init_from) on one worker; a job whose
  // model does not fit it is refused at submit, naming the tensor.
  auto cluster = LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string coordinator = absl::StrCat("--coordinator=", (*cluster)->address());
  const std::string init_from = absl::StrCat("  seq_len: 16\n  init_from: ", dir, "/hf\n");
  const std::string continued = WriteJobFile(
      "continued.yaml", absl::StrReplaceAll(kTinyJobYaml, {{"  seq_len: 16\n", init_from},
                                                           {"world_size: 2", "world_size: 1"}}));
  auto resumed = RunCommand(BinaryPath("client/tessera"), {"submit", continued, "--watch", coordinator},
                            absl::Seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(resumed.output, "SUCCEEDED")) << resumed.output;
  const std::string misfit = WriteJobFile(
      "misfit.yaml", absl::StrReplaceAll(kTinyJobYaml, {{"  seq_len: 16\n", init_from},
                                                        {"ffn_dim: 64", "ffn_dim: 96"}}));
  auto refused = RunCommand(BinaryPath("client/tessera"), {"submit", misfit, coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "INVALID_ARGUMENT")) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.output, "intermediate_size is 64, but model.ffn_dim is 96"))
      << refused.output;
}

TEST(CliTest, JobsListsEveryPageAndDeleteForgetsAFinishedJob) {
  auto cluster = LocalCluster::Start(0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string coordinator = absl::StrCat("--coordinator=", (*cluster)->address());
  // More jobs than one page (100) holds; none can run without workers.
  const std::string job_file = WriteJobFile("waits.yaml", kTinyJobYaml);
  constexpr int kJobs = 105;
  for (int i = 0; i < kJobs; ++i) {
    auto submit = RunCommand(BinaryPath("client/tessera"), {"submit", job_file, coordinator},
                             absl::Seconds(30));
    ASSERT_EQ(submit.exit_code, 0) << submit.output;
  }
  auto jobs = RunCommand(BinaryPath("client/tessera"), {"jobs", coordinator}, absl::Seconds(30));
  ASSERT_EQ(jobs.exit_code, 0) << jobs.output;
  std::vector<std::string> lines = absl::StrSplit(jobs.output, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), kJobs + 1u) << jobs.output;  // + header
  EXPECT_TRUE(absl::StrContains(jobs.output, "job-1 ")) << jobs.output;
  EXPECT_TRUE(absl::StrContains(jobs.output, absl::StrCat("job-", kJobs, " "))) << jobs.output;

  auto running = RunCommand(BinaryPath("client/tessera"), {"delete", "job-1", coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(running.exit_code, 1) << running.output;
  EXPECT_TRUE(absl::StrContains(running.output, "FAILED_PRECONDITION")) << running.output;
  ASSERT_EQ(RunCommand(BinaryPath("client/tessera"), {"cancel", "job-1", coordinator},
                       absl::Seconds(30))
                .exit_code,
            0);
  auto deleted = RunCommand(BinaryPath("client/tessera"), {"delete", "job-1", coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_EQ(deleted.output, "deleted job-1\n");
  auto missing = RunCommand(BinaryPath("client/tessera"), {"status", "job-1", coordinator},
                            absl::Seconds(30));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(missing.output, "NOT_FOUND")) << missing.output;
}

}  // namespace
}  // namespace tessera

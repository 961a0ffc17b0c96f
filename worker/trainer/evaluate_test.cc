// Validation loss on the CPU engine with real Gloo ranks in forked processes:
//  - before any step, 2 ranks with micro-batch B score the same loss and
//    token count as 1 rank with 2B (the same sequences, summed in another
//    order), and both ranks of a run report the identical value; after
//    training steps the two runs stay as close as their training losses;
//  - an evaluation changes no training state: the checkpointed master
//    weights, Adam m and v, FP8 shards and FP8 scaling block are
//    byte-identical before and after one, and a run with evaluations has
//    bit-identical training losses to one without, with delayed and
//    current FP8 scaling, bf16, one rank and two;
//  - an evaluation after a step leaves every gradient buffer (gradient
//    shards and full-size gradients) byte-identical, at one rank and two;
//  - Evaluate without data.validation, or before InitCollective, is
//    FAILED_PRECONDITION.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/synthetic_task.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

// Held-out data: the addition task from another seed than training's.
const std::string& ValidationFile() {
  static const std::string path = AdditionTokenFile("validation", 99, 20000);
  return path;
}

v1::JobSpec Spec(int micro_batch, int eval_batches) {
  v1::JobSpec spec = TinyCpuTestJobSpec(micro_batch);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(ValidationFile());
  v->set_eval_interval_steps(2);
  v->set_eval_batches(eval_batches);
  spec.set_steps(6);
  return spec;
}

// What one rank reports: the training losses, then for each evaluation
// its loss and tokens.
struct RankRun {
  std::vector<float> losses;
  std::vector<float> eval_losses;
  std::vector<int64_t> eval_tokens;
  bool state_unchanged_by_evaluation = false;
};

struct Plan {
  bool evaluate = true;          // before step 0 and after steps 1, 3, 5
  int checkpoint_around = -1;    // after this step: checkpoint, evaluate, checkpoint
};

int RunRank(const v1::JobSpec& spec, int rank, int world, const std::string& dir, Plan plan) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  if (!trainer.Setup(spec, rank, world).ok()) return 2;
  FileRendezvousStore store(dir);
  if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok()) return 3;
  std::ofstream out(absl::StrCat(dir, "/out-", rank), std::ios::binary);
  auto evaluate = [&]() -> bool {
    absl::StatusOr<ValidationReport> v = trainer.Evaluate();
    if (!v.ok()) {
      std::cerr << "rank " << rank << ": " << v.status() << "\n";
      return false;
    }
    out << "eval " << v->loss << " " << v->tokens << "\n";
    return true;
  };
  if (plan.evaluate && !evaluate()) return 4;
  for (int s = 0; s < spec.steps(); ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    if (!report.ok()) return 5;
    uint32_t bits = 0;
    std::memcpy(&bits, &report->loss, 4);
    out << "loss " << bits << "\n";
    if (s == plan.checkpoint_around) {
      const std::string before = absl::StrCat(dir, "/before"), after = absl::StrCat(dir, "/after");
      if (!trainer.Checkpoint(s + 1, before).ok()) return 6;
      if (!evaluate()) return 7;
      if (!trainer.Checkpoint(s + 1, after).ok()) return 8;
      const std::string state = absl::StrCat("/rank-", rank, ".state");
      const std::string a = ReadFileToString(StepDir(before, s + 1) + state);
      const std::string b = ReadFileToString(StepDir(after, s + 1) + state);
      out << "state " << (!a.empty() && a == b ? "same" : "changed") << "\n";
    } else if (plan.evaluate && (s % 2 == 1)) {
      if (!evaluate()) return 9;
    }
  }
  return 0;
}

std::vector<RankRun> RunRanks(const v1::JobSpec& spec, int world, Plan plan) {
  const std::string dir = TestDir("eval");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) _exit(RunRank(spec, r, world, dir, plan));
    pids.push_back(pid);
  }
  std::vector<RankRun> runs(world);
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " exit " << WEXITSTATUS(status);
    std::ifstream in(absl::StrCat(dir, "/out-", r));
    std::string kind;
    while (in >> kind) {
      if (kind == "loss") {
        uint32_t bits = 0;
        in >> bits;
        float loss;
        std::memcpy(&loss, &bits, 4);
        runs[r].losses.push_back(loss);
      } else if (kind == "eval") {
        float loss = 0;
        int64_t tokens = 0;
        in >> loss >> tokens;
        runs[r].eval_losses.push_back(loss);
        runs[r].eval_tokens.push_back(tokens);
      } else if (kind == "state") {
        std::string verdict;
        in >> verdict;
        runs[r].state_unchanged_by_evaluation = verdict == "same";
      }
    }
  }
  return runs;
}

TEST(Evaluate, TwoRanksScoreWhatOneRankScores) {
  // World 2 at micro-batch 2 reads the same validation sequences as world 1
  // at micro-batch 4 (and the same training data).
  std::vector<RankRun> two = RunRanks(Spec(2, 3), 2, Plan{});
  std::vector<RankRun> one = RunRanks(Spec(4, 3), 1, Plan{});
  ASSERT_EQ(one[0].eval_losses.size(), 4u);  // before step 0, after steps 1, 3 and 5
  ASSERT_EQ(two[0].eval_losses.size(), 4u);
  ASSERT_EQ(two[1].eval_losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(one[0].eval_losses[i])) << i;
    EXPECT_GT(one[0].eval_losses[i], 0.f) << i;
    EXPECT_EQ(two[0].eval_losses[i], two[1].eval_losses[i]) << i;  // all-reduced
    EXPECT_EQ(two[0].eval_tokens[i], one[0].eval_tokens[i]) << i;
    EXPECT_EQ(one[0].eval_tokens[i], 3 * 4 * 16) << i;  // every target is valid
  }
  // Same weights and sequences: only the summation order differs.
  EXPECT_NEAR(two[0].eval_losses[0], one[0].eval_losses[0], 1e-5 * one[0].eval_losses[0]);
  // After training, as close as the training losses themselves.
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_NEAR(two[0].eval_losses[i], one[0].eval_losses[i], 2e-2 * one[0].eval_losses[i]) << i;
  }
  // Training moved the weights, so the validation loss moved too.
  EXPECT_NE(one[0].eval_losses[0], one[0].eval_losses[3]);
}

// A run with evaluations trains bit-identically to one without, and the
// checkpointed state is byte-identical around an evaluation.
void ExpectNoSideEffects(const v1::JobSpec& spec, int world) {
  Plan with;
  with.checkpoint_around = 2;
  Plan without;
  without.evaluate = false;
  std::vector<RankRun> evaluated = RunRanks(spec, world, with);
  std::vector<RankRun> plain = RunRanks(spec, world, without);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r, " of ", world));
    ASSERT_EQ(evaluated[r].losses.size(), static_cast<size_t>(spec.steps()));
    EXPECT_EQ(evaluated[r].losses, plain[r].losses);  // bit for bit
    // Before step 0, after steps 1 and 3 and 5, and between the checkpoints after step 2.
    EXPECT_EQ(evaluated[r].eval_losses.size(), 5u);
    EXPECT_TRUE(evaluated[r].state_unchanged_by_evaluation);
    EXPECT_TRUE(plain[r].eval_losses.empty());
  }
}

TEST(Evaluate, LeavesTrainingUntouchedWithDelayedScaling) {
  ExpectNoSideEffects(Spec(2, 2), 1);
  ExpectNoSideEffects(Spec(2, 2), 2);
}

TEST(Evaluate, LeavesTrainingUntouchedWithCurrentScalingAndBf16) {
  v1::JobSpec current = Spec(2, 2);
  current.mutable_fp8()->mutable_current();
  ExpectNoSideEffects(current, 2);
  v1::JobSpec bf16 = Spec(2, 2);
  bf16.mutable_fp8()->set_disabled(true);
  ExpectNoSideEffects(bf16, 2);
}

// Rank body: one step, so that every gradient buffer holds that step's
// values, then every gradient buffer's bytes (all gradient shards and the
// full-size gradients) before and after an evaluation. Writes "same" or
// "changed" and the number of nonzero bytes before.
int GradientsAroundEvaluation(const v1::JobSpec& spec, int rank, int world,
                              const std::string& dir) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  if (!trainer.Setup(spec, rank, world).ok()) return 2;
  FileRendezvousStore store(dir);
  if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok()) return 3;
  if (!trainer.RunStep(0).ok()) return 4;
  absl::StatusOr<std::vector<uint8_t>> before = trainer.GradientBytes();
  if (!before.ok()) return 5;
  absl::StatusOr<ValidationReport> v = trainer.Evaluate();
  if (!v.ok()) return 6;
  absl::StatusOr<std::vector<uint8_t>> after = trainer.GradientBytes();
  if (!after.ok()) return 7;
  std::ofstream out(absl::StrCat(dir, "/grads-", rank));
  out << (*before == *after ? "same" : "changed") << " "
      << std::count_if(before->begin(), before->end(), [](uint8_t b) { return b != 0; }) << "\n";
  return 0;
}

TEST(Evaluate, WritesNoGradientBuffer) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("world ", world));
    const v1::JobSpec spec = Spec(2, 2);
    const std::string dir = TestDir("eval-grads");
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      pid_t pid = fork();
      if (pid == 0) _exit(GradientsAroundEvaluation(spec, r, world, dir));
      pids.push_back(pid);
    }
    for (int r = 0; r < world; ++r) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " exit " << WEXITSTATUS(status);
      std::ifstream in(absl::StrCat(dir, "/grads-", r));
      std::string verdict;
      int64_t nonzero = 0;
      in >> verdict >> nonzero;
      EXPECT_GT(nonzero, 0) << "rank " << r << ": the step left every gradient at zero";
      EXPECT_EQ(verdict, "same") << "rank " << r << ": the evaluation wrote a gradient buffer";
    }
  }
}

// Evaluate on one rank (no steps), for comparing validation setups.
ValidationReport EvaluateOnce(const v1::JobSpec& spec) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  EXPECT_TRUE(setup.ok()) << setup.status();
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  absl::StatusOr<ValidationReport> v = trainer.Evaluate();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : ValidationReport{};
}

v1::JobSpec SourcesSpec(const std::vector<std::string>& paths) {
  v1::JobSpec spec = Spec(2, 3);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->clear_token_file();
  for (const std::string& path : paths) v->add_sources()->set_path(path);
  return spec;
}

TEST(Evaluate, EachValidationSourceIsScoredOnItsOwn) {
  const std::string first = AdditionTokenFile("val-first", 5, 4000);
  const std::string second = AdditionTokenFile("val-second", 6, 4000);
  const ValidationReport both = EvaluateOnce(SourcesSpec({first, second}));
  ASSERT_EQ(both.sources.size(), 2u);
  EXPECT_EQ(both.sources[0].path, first);
  EXPECT_EQ(both.sources[1].path, second);
  // A source scores the same alone as beside another.
  const ValidationReport alone0 = EvaluateOnce(SourcesSpec({first}));
  const ValidationReport alone1 = EvaluateOnce(SourcesSpec({second}));
  ASSERT_EQ(alone0.sources.size(), 1u);
  ASSERT_EQ(alone1.sources.size(), 1u);
  EXPECT_EQ(both.sources[0].loss, alone0.sources[0].loss);
  EXPECT_EQ(both.sources[1].loss, alone1.sources[0].loss);
  EXPECT_NE(both.sources[0].loss, both.sources[1].loss);
  // 3 micro-batches of 2 sequences of 16 tokens each, every target valid.
  EXPECT_EQ(both.sources[0].tokens, 3 * 2 * 16);
  EXPECT_EQ(both.tokens, both.sources[0].tokens + both.sources[1].tokens);
  // The total is the mean over every token scored.
  EXPECT_NEAR(both.loss,
              (both.sources[0].loss * both.sources[0].tokens +
               both.sources[1].loss * both.sources[1].tokens) / both.tokens,
              1e-5);
  // The single validation file reports no per-source entries.
  EXPECT_TRUE(EvaluateOnce(Spec(2, 3)).sources.empty());
}

TEST(Evaluate, AnUnusableValidationSourceFailsSetupNamingIt) {
  v1::JobSpec spec =
      SourcesSpec({ValidationFile(), absl::StrCat(std::getenv("TEST_TMPDIR"), "/absent-dir")});
  FsdpTrainer refused(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = refused.Setup(spec, 0, 1);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(setup.status().message().rfind("data.validation.sources[1]: ", 0), 0u)
      << setup.status();
}

TEST(Evaluate, RefusedWithoutValidationDataOrOutOfOrder) {
  v1::JobSpec spec = Spec(2, 1);
  FsdpTrainer early(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(early.Setup(spec, 0, 1).ok());
  EXPECT_EQ(early.Evaluate().status().code(), absl::StatusCode::kFailedPrecondition);

  spec.mutable_data()->clear_validation();
  FsdpTrainer none(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(none.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(none.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  absl::StatusOr<ValidationReport> v = none.Evaluate();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("data.validation"), std::string::npos) << v.status();

  // A validation file the model's vocabulary cannot hold fails setup.
  v1::JobSpec wide = Spec(2, 1);
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/wide.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>(100, 64)).ok());  // vocab is 64
  wide.mutable_data()->mutable_validation()->set_token_file(path);
  FsdpTrainer refused(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = refused.Setup(wide, 0, 1);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(setup.status().message().find("data.validation.token_file"), std::string::npos)
      << setup.status();
}

}  // namespace
}  // namespace tessera

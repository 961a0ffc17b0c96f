// The bf16 shadow loss (shadow_loss.cc) on the CPU engine, the specification
// for every engine:
//  - training with the shadow every 2 steps gives the bits of training
//    without it: every step's loss and gradient norm, the gradients and the
//    saved state (masters, Adam moments, FP8 codes, scales and amax
//    histories), under delayed and current FP8 scaling, with recomputation
//    and with document masking; and so do two sharded ranks, with and
//    without resharding after forward, and four ranks in two hybrid shard
//    groups, whose shadow losses agree;
//  - a shadow step allocates nothing, and Setup allocates the memory
//    estimate (common/memory_estimate.h) with the shadow on;
//  - the shadow's bf16 loss is, bit for bit, the validation loss a bf16 job
//    (fp8.disabled) restored from the same checkpoint reports for the same
//    batch: the same ops on the same bf16 weights, cast from the same
//    masters by the same Cast. Its FP8 loss is, bit for bit, the FP8 job's
//    own Evaluate of that batch;
//  - it runs after steps N-1, 2N-1, ... only;
//  - with fp8.shadow_batch_sequences K (or its default, 2) it runs only the
//    first K sequences of the held-out micro-batch: its two losses are the
//    FP8 and the bf16 model's losses over exactly those sequences, and
//    training keeps its bits (with documents too).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/spec_limits.h"
#include "common/memory_estimate.h"
#include "common/synthetic_task.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/data/ignore_index.h"
#include "worker/data/validation_batch_source.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr int kSteps = 6;
constexpr int kInterval = 2;  // the shadow runs after steps 1, 3 and 5

enum class Recipe { kDelayedFp8, kCurrentFp8 };
const char* RecipeName(Recipe r) { return r == Recipe::kDelayedFp8 ? "delayed" : "current"; }

v1::JobSpec BaseSpec(Recipe recipe) {
  v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  spec.mutable_model()->set_n_layers(3);
  if (recipe == Recipe::kCurrentFp8) spec.mutable_fp8()->mutable_current()->set_margin(0);
  return spec;
}

v1::JobSpec WithShadow(v1::JobSpec spec, int interval) {
  spec.mutable_fp8()->set_shadow_interval_steps(interval);
  return spec;
}

struct RunRecord {
  std::vector<float> losses, grad_norms;
  std::vector<std::optional<ShadowReport>> shadows;  // per step
  std::vector<uint8_t> gradients;  // after the last step
  std::vector<uint8_t> state;      // the rank's checkpoint file after the last step
  bool allocated_during_steps = true;
};

RunRecord TrainOneRank(const v1::JobSpec& spec, int steps) {
  RunRecord run;
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  EXPECT_TRUE(setup.ok()) << setup.status();
  if (!setup.ok()) return run;
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  const int64_t allocations = trainer.allocation_count();
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return run;
    run.losses.push_back(report->loss);
    run.grad_norms.push_back(report->grad_norm);
    run.shadows.push_back(report->shadow);
  }
  run.allocated_during_steps = trainer.allocation_count() != allocations;
  absl::StatusOr<std::vector<uint8_t>> gradients = trainer.GradientBytes();
  EXPECT_TRUE(gradients.ok());
  if (gradients.ok()) run.gradients = *std::move(gradients);
  const std::string root = TestDir("state");
  absl::StatusOr<std::string> manifest = trainer.Checkpoint(steps, root);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  const std::string state = ReadFileToString(StepDir(root, steps) + "/rank-0.state");
  run.state.assign(state.begin(), state.end());
  EXPECT_FALSE(run.state.empty());
  return run;
}

// The shadow ran after exactly the steps it should, with two finite losses
// over the held-out batch that differ (FP8 is not bf16).
void ExpectShadowSteps(const RunRecord& r, int interval) {
  for (size_t s = 0; s < r.shadows.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    ASSERT_EQ(r.shadows[s].has_value(), (s + 1) % interval == 0);
    if (!r.shadows[s].has_value()) continue;
    const ShadowReport& shadow = *r.shadows[s];
    EXPECT_TRUE(std::isfinite(shadow.fp8_loss));
    EXPECT_TRUE(std::isfinite(shadow.bf16_loss));
    EXPECT_NE(shadow.fp8_loss, shadow.bf16_loss);
    EXPECT_LT(std::fabs(shadow.fp8_loss - shadow.bf16_loss), 0.5f);
    EXPECT_GT(shadow.tokens, 0);
  }
}

void ExpectSameTraining(const RunRecord& with, const RunRecord& without) {
  ASSERT_EQ(with.losses.size(), without.losses.size());
  for (size_t s = 0; s < with.losses.size(); ++s) {
    EXPECT_EQ(with.losses[s], without.losses[s]) << "step " << s;
    EXPECT_EQ(with.grad_norms[s], without.grad_norms[s]) << "step " << s;
  }
  EXPECT_EQ(with.gradients, without.gradients);
  // Master weights, Adam moments, FP8 codes, scales and amax histories.
  EXPECT_EQ(with.state, without.state);
}

struct Variant {
  const char* name;
  void (*apply)(v1::JobSpec&);
};

void DocumentMasked(v1::JobSpec& spec) {
  v1::SyntheticData task;
  task.set_task(v1::SyntheticData::ADDITION);
  const std::string path = TestDir("documents") + "/data.tok";
  ASSERT_TRUE(WriteSyntheticTokenFile(task, 7, 50000, path, /*mean_document_tokens=*/5).ok());
  spec.mutable_data()->set_token_file(path);
  spec.mutable_data()->set_document_masking(true);
}

const Variant kVariants[] = {
    {"plain", [](v1::JobSpec&) {}},
    {"recompute BLOCKS",
     [](v1::JobSpec& s) { s.mutable_memory()->set_recompute(v1::MemoryConfig::BLOCKS); }},
    {"recompute SELECTIVE every 2",
     [](v1::JobSpec& s) {
       s.mutable_memory()->set_recompute(v1::MemoryConfig::SELECTIVE);
       s.mutable_memory()->set_every_n_blocks(2);
     }},
    {"document masking", DocumentMasked},
    // The shadow runs fewer sequences than the step: the leading rows of
    // the activations, of the held-out inputs and of the document starts.
    {"micro-batch 4, shadow over its first sequence",
     [](v1::JobSpec& s) {
       s.mutable_data()->set_micro_batch_size(4);
       s.mutable_fp8()->set_shadow_batch_sequences(1);
     }},
    {"document masking, micro-batch 4, shadow over 3 sequences",
     [](v1::JobSpec& s) {
       DocumentMasked(s);
       s.mutable_data()->set_micro_batch_size(4);
       s.mutable_fp8()->set_shadow_batch_sequences(3);
     }},
};

TEST(ShadowLoss, TrainingIsBitIdenticalWithAndWithoutTheShadow) {
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8}) {
    for (const Variant& variant : kVariants) {
      SCOPED_TRACE(absl::StrCat(RecipeName(recipe), ", ", variant.name));
      v1::JobSpec spec = BaseSpec(recipe);
      variant.apply(spec);
      const RunRecord without = TrainOneRank(spec, kSteps);
      const RunRecord with = TrainOneRank(WithShadow(spec, kInterval), kSteps);
      ASSERT_EQ(with.losses.size(), static_cast<size_t>(kSteps));
      EXPECT_LT(without.losses.back(), without.losses.front());  // it trains
      ExpectSameTraining(with, without);
      ExpectShadowSteps(with, kInterval);
      for (const auto& shadow : without.shadows) EXPECT_FALSE(shadow.has_value());
      EXPECT_FALSE(with.allocated_during_steps);
    }
  }
}

TEST(ShadowLoss, SetupAllocatesTheEstimate) {
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8}) {
    const v1::JobSpec spec = WithShadow(BaseSpec(recipe), kInterval);
    for (const int world : {1, 3}) {
      SCOPED_TRACE(absl::StrCat(RecipeName(recipe), ", world ", world));
      FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
      ASSERT_TRUE(trainer.Setup(spec, 1 % world, world).ok());
      const RankMemoryEstimate e = EstimateRankMemory(spec, 1 % world, world);
      EXPECT_EQ(trainer.allocated_bytes(), e.trainer_bytes()) << e.ToString();
      EXPECT_GT(e.trainer_bytes(), EstimateRankMemory(BaseSpec(recipe), 1 % world, world)
                                       .trainer_bytes());
    }
  }
}

// ---- The two losses against the models they stand for ---------------------

// Held-out data: the addition task from another seed than training's.
const std::string& ValidationFile() {
  static const std::string path = AdditionTokenFile("validation", 99, 20000);
  return path;
}

// data.validation on ValidationFile(), one batch a pass: the shadow's
// held-out batch is then this rank's share of the first validation batch.
void WithOneValidationBatch(v1::JobSpec& spec) {
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(ValidationFile());
  v->set_eval_interval_steps(100);
  v->set_eval_batches(1);
}

// Runs steps 0 .. steps - 1 of a trainer set up and joined; the last step's
// shadow report (none if a step failed, which is reported).
std::optional<ShadowReport> ShadowOfLastStep(FsdpTrainer& trainer, int steps) {
  std::optional<ShadowReport> shadow;
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    if (!report.ok()) {
      ADD_FAILURE() << "step " << s << ": " << report.status();
      return std::nullopt;
    }
    shadow = report->shadow;
  }
  return shadow;
}

TEST(ShadowLoss, LossesAreTheFp8AndTheBf16ModelsEvaluationOfTheBatch) {
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8}) {
    SCOPED_TRACE(RecipeName(recipe));
    // With data.validation the held-out batch is this rank's share of the
    // first validation batch, the batch Evaluate scores with eval_batches 1.
    v1::JobSpec spec = WithShadow(BaseSpec(recipe), 3);
    WithOneValidationBatch(spec);
    FsdpTrainer fp8(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(fp8.Setup(spec, 0, 1).ok());
    ASSERT_TRUE(fp8.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    const std::optional<ShadowReport> shadow = ShadowOfLastStep(fp8, 3);
    ASSERT_TRUE(shadow.has_value());
    absl::StatusOr<ValidationReport> fp8_eval = fp8.Evaluate();
    ASSERT_TRUE(fp8_eval.ok()) << fp8_eval.status();
    EXPECT_EQ(shadow->fp8_loss, fp8_eval->loss);
    EXPECT_EQ(shadow->tokens, fp8_eval->tokens);

    // The bf16 job with the same masters: restored from the FP8 job's
    // checkpoint, which re-derives its bf16 compute weights from them.
    const std::string root = TestDir("fp8-to-bf16");
    ASSERT_TRUE(fp8.Checkpoint(3, root).ok());
    ASSERT_TRUE(WriteCommitMarker(root, {3, 1}).ok());  // as the coordinator does
    v1::JobSpec bf16_spec = spec;
    bf16_spec.mutable_fp8()->set_disabled(true);
    bf16_spec.mutable_fp8()->clear_shadow_interval_steps();
    FsdpTrainer bf16(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(bf16.Setup(bf16_spec, 0, 1).ok());
    const absl::Status restored = bf16.Restore(root, 3);
    ASSERT_TRUE(restored.ok()) << restored;
    ASSERT_TRUE(bf16.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    absl::StatusOr<ValidationReport> bf16_eval = bf16.Evaluate();
    ASSERT_TRUE(bf16_eval.ok()) << bf16_eval.status();
    EXPECT_EQ(shadow->bf16_loss, bf16_eval->loss);
    EXPECT_NE(shadow->fp8_loss, shadow->bf16_loss);
  }
}

// ---- Fewer sequences than the micro-batch (fp8.shadow_batch_sequences) -----

// A loss sum and the valid tokens it is over.
struct LossSum {
  double sum = 0;
  int64_t tokens = 0;
  double mean() const { return sum / static_cast<double>(tokens); }
};

// The next-token loss of `trainer`'s model over the first `sequences`
// sequences of a [B * S] batch, one sequence at a time through
// ForwardLogits, with the softmax taken here in double precision.
LossSum LossOfFirstSequences(FsdpTrainer& trainer, const std::vector<int32_t>& inputs,
                             const std::vector<int32_t>& targets, int64_t seq, int64_t vocab,
                             int sequences) {
  LossSum loss;
  for (int b = 0; b < sequences; ++b) {
    const std::vector<int32_t> ids(inputs.begin() + b * seq, inputs.begin() + (b + 1) * seq);
    absl::StatusOr<std::vector<float>> logits = trainer.ForwardLogits(ids);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return loss;
    for (int64_t i = 0; i < seq; ++i) {
      const int32_t target = targets[b * seq + i];
      if (target == kIgnoreIndex) continue;
      const float* row = logits->data() + i * vocab;
      double max = row[0], total = 0;
      for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, row[v]);
      for (int64_t v = 0; v < vocab; ++v) total += std::exp(row[v] - max);
      loss.sum += max + std::log(total) - row[target];
      ++loss.tokens;
    }
  }
  return loss;
}

// With a micro-batch of 4 and K = 1, 3 or the default (0: 2 sequences),
// the shadow's FP8 and bf16 losses are those models' losses over the first
// K sequences of the held-out batch, scored here one sequence at a time.
// Delayed scaling: every FP8 cast uses its recorded scale, so a sequence's
// logits do not depend on the rows beside it (current scaling would take
// the amax of whatever batch ForwardLogits runs). The sums differ only in
// order and precision, hence the tolerance; the loss over all four
// sequences is kept several tolerances away, so the check tells K
// sequences from the whole batch.
TEST(ShadowLoss, ShadowOverFewerSequencesIsTheLossOfThoseSequences) {
  constexpr int kMicroBatch = 4;
  constexpr double kTolerance = 1e-4;
  for (const int requested : {1, 3, 0}) {
    const int sequences = ShadowBatchSequences(requested, kMicroBatch);
    SCOPED_TRACE(absl::StrCat("shadow_batch_sequences ", requested, ": ", sequences));
    v1::JobSpec spec = WithShadow(BaseSpec(Recipe::kDelayedFp8), 3);
    spec.mutable_data()->set_micro_batch_size(kMicroBatch);
    spec.mutable_fp8()->set_shadow_batch_sequences(requested);
    WithOneValidationBatch(spec);
    const int64_t seq = spec.model().seq_len(), vocab = spec.model().vocab_size();
    FsdpTrainer fp8(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(fp8.Setup(spec, 0, 1).ok());
    ASSERT_TRUE(fp8.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    const std::optional<ShadowReport> shadow = ShadowOfLastStep(fp8, 3);
    ASSERT_TRUE(shadow.has_value());

    // The held-out batch: this rank's first validation batch.
    absl::StatusOr<std::vector<ValidationSet>> sets = OpenValidationSets(spec, 0, 1);
    ASSERT_TRUE(sets.ok()) << sets.status();
    std::vector<int32_t> inputs(kMicroBatch * seq), targets(kMicroBatch * seq);
    ASSERT_TRUE((*sets)[0]
                    .batches->ReadBatch(0, absl::MakeSpan(inputs), absl::MakeSpan(targets))
                    .ok());

    const LossSum fp8_first = LossOfFirstSequences(fp8, inputs, targets, seq, vocab, sequences);
    const LossSum fp8_all = LossOfFirstSequences(fp8, inputs, targets, seq, vocab, kMicroBatch);
    ASSERT_GT(fp8_first.tokens, 0);
    ASSERT_GT(fp8_all.tokens, fp8_first.tokens);
    EXPECT_EQ(shadow->tokens, fp8_first.tokens);
    EXPECT_NEAR(shadow->fp8_loss, fp8_first.mean(), kTolerance);
    EXPECT_GT(std::fabs(fp8_all.mean() - fp8_first.mean()), 5 * kTolerance);

    // The bf16 model with the same masters, as in the test above.
    const std::string root = TestDir(absl::StrCat("fewer-sequences-", requested));
    ASSERT_TRUE(fp8.Checkpoint(3, root).ok());
    ASSERT_TRUE(WriteCommitMarker(root, {3, 1}).ok());
    v1::JobSpec bf16_spec = spec;
    bf16_spec.mutable_fp8()->set_disabled(true);
    bf16_spec.mutable_fp8()->clear_shadow_interval_steps();
    bf16_spec.mutable_fp8()->clear_shadow_batch_sequences();
    FsdpTrainer bf16(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(bf16.Setup(bf16_spec, 0, 1).ok());
    ASSERT_TRUE(bf16.Restore(root, 3).ok());
    ASSERT_TRUE(bf16.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    const LossSum bf16_first = LossOfFirstSequences(bf16, inputs, targets, seq, vocab, sequences);
    const LossSum bf16_all = LossOfFirstSequences(bf16, inputs, targets, seq, vocab, kMicroBatch);
    EXPECT_NEAR(shadow->bf16_loss, bf16_first.mean(), kTolerance);
    EXPECT_GT(std::fabs(bf16_all.mean() - bf16_first.mean()), 5 * kTolerance);
    EXPECT_NE(shadow->fp8_loss, shadow->bf16_loss);
  }
}

// A shadow over more sequences than the micro-batch holds is refused at
// Setup, naming the field (the coordinator refuses such a spec first).
TEST(ShadowLoss, SetupRefusesMoreSequencesThanTheMicroBatch) {
  v1::JobSpec spec = WithShadow(BaseSpec(Recipe::kDelayedFp8), kInterval);
  spec.mutable_fp8()->set_shadow_batch_sequences(spec.data().micro_batch_size() + 1);
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  const absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(setup.status().message().find("fp8.shadow_batch_sequences"), std::string::npos)
      << setup.status();
}

// ---- Sharded ranks, in forked processes over Gloo --------------------------

// Writes each step's loss and gradient norm, the shadow losses where they
// ran, and every block linear's gathered compute weight after the last step.
int TrainRank(const v1::JobSpec& spec, int rank, int world, const std::string& rdzv,
              const std::string& out, const std::string& shadow_out) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  if (!trainer.Setup(spec, rank, world).ok()) return 2;
  FileRendezvousStore store(rdzv);
  if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok()) return 3;
  const int64_t allocations = trainer.allocation_count();
  std::ofstream file(out, std::ios::binary);
  std::ofstream shadows(shadow_out, std::ios::binary);
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    if (!report.ok()) return 4;
    file.write(reinterpret_cast<const char*>(&report->loss), sizeof(float));
    file.write(reinterpret_cast<const char*>(&report->grad_norm), sizeof(float));
    if (report->shadow.has_value()) {
      shadows.write(reinterpret_cast<const char*>(&report->shadow->fp8_loss), sizeof(float));
      shadows.write(reinterpret_cast<const char*>(&report->shadow->bf16_loss), sizeof(float));
    }
  }
  if (trainer.allocation_count() != allocations) return 6;
  for (int l = 0; l < spec.model().n_layers(); ++l) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      absl::StatusOr<std::vector<uint8_t>> w = trainer.GatheredWeightBytes(l, linear);
      if (!w.ok()) return 5;
      file.write(reinterpret_cast<const char*>(w->data()), static_cast<std::streamsize>(w->size()));
    }
  }
  return 0;
}

// Per rank, what TrainRank wrote.
struct Ranks {
  std::vector<std::string> training, shadows;
};

Ranks TrainRanks(const v1::JobSpec& spec, int world) {
  const std::string dir = TestDir("ranks");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      _exit(TrainRank(spec, r, world, dir, absl::StrCat(dir, "/out-", r),
                      absl::StrCat(dir, "/shadow-", r)));
    }
    pids.push_back(pid);
  }
  Ranks out;
  out.training.resize(world);
  out.shadows.resize(world);
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " exit " << WEXITSTATUS(status);
    out.training[r] = ReadFileToString(absl::StrCat(dir, "/out-", r));
    out.shadows[r] = ReadFileToString(absl::StrCat(dir, "/shadow-", r));
  }
  return out;
}

TEST(ShadowLoss, ShardedRanksTrainTheSameBitsAndAgreeOnTheShadow) {
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8}) {
    for (const bool reshard : {false, true}) {
      SCOPED_TRACE(absl::StrCat(RecipeName(recipe), reshard ? ", resharded" : ""));
      v1::JobSpec spec = BaseSpec(recipe);
      spec.mutable_data()->set_micro_batch_size(1);
      spec.set_reshard_after_forward(reshard);
      const Ranks without = TrainRanks(spec, 2);
      const Ranks with = TrainRanks(WithShadow(spec, kInterval), 2);
      for (int r = 0; r < 2; ++r) {
        ASSERT_FALSE(without.training[r].empty());
        EXPECT_EQ(with.training[r], without.training[r]) << "rank " << r;
        EXPECT_TRUE(without.shadows[r].empty());
      }
      // Three shadow steps, two losses each, the same global values on both ranks.
      ASSERT_EQ(with.shadows[0].size(), 3 * 2 * sizeof(float));
      EXPECT_EQ(with.shadows[0], with.shadows[1]);
      const float* losses = reinterpret_cast<const float*>(with.shadows[0].data());
      for (int i = 0; i < 3; ++i) EXPECT_NE(losses[2 * i], losses[2 * i + 1]) << i;
    }
  }
}

// Hybrid sharding: two shard groups of two ranks, each group holding the
// whole model; the held-out batch is split over all four ranks and the
// sums are all-reduced within and then across the groups.
TEST(ShadowLoss, HybridShardedRanksTrainTheSameBitsAndAgreeOnTheShadow) {
  v1::JobSpec spec = BaseSpec(Recipe::kDelayedFp8);
  spec.mutable_data()->set_micro_batch_size(1);
  spec.mutable_parallelism()->set_shard_group_size(2);
  const Ranks without = TrainRanks(spec, 4);
  const Ranks with = TrainRanks(WithShadow(spec, kInterval), 4);
  ASSERT_EQ(with.shadows[0].size(), 3 * 2 * sizeof(float));
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(without.training[r].empty());
    EXPECT_EQ(with.training[r], without.training[r]) << "rank " << r;
    EXPECT_EQ(with.shadows[r], with.shadows[0]) << "rank " << r;
  }
}

}  // namespace
}  // namespace tessera

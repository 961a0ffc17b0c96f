// Activation recomputation (job.proto's MemoryConfig) on the CPU engine, the
// specification for every engine:
//  - 20 steps with BLOCKS or SELECTIVE, on every block or every other one,
//    give the losses, gradient norms, gradients and saved state (master
//    weights, Adam moments, FP8 codes, every scale and amax history) of the
//    same 20 steps without recomputation, bit for bit, under delayed FP8
//    scaling, current FP8 scaling and bf16;
//  - the recomputed forward moves no amax history and measures no amax a
//    second time: per step, the same scale updates and amax reductions run
//    as without recomputation;
//  - two sharded ranks that gather each block again in backward give the
//    bits of the same ranks without recomputation;
//  - what Setup allocates is the memory estimate (common/memory_estimate.h)
//    for each policy, BLOCKS < SELECTIVE < NONE, and a step allocates
//    nothing.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/memory_estimate.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/counting_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

std::string FreshDir(const std::string& name) {
  static int n = 0;
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "-", getpid(), "-", n++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// How many FP8 scale slots had their amax history advanced, and how many
// amax reductions ran: the CPU engine behind a counter.
struct ScalingCalls {
  std::atomic<int64_t> history_slots{0}, amax_reductions{0};
};
class ScalingCallCounter : public CountingOps {
 public:
  ScalingCallCounter(std::unique_ptr<Ops> engine, ScalingCalls* calls)
      : CountingOps(std::move(engine)), calls_(calls) {}
  absl::Status Amax(const TensorDesc& in, float* amax, Stream* s) override {
    ++calls_->amax_reductions;
    return CountingOps::Amax(in, amax, s);
  }
  absl::Status UpdateFp8Scales(float* amax, float* history, float* scale, float* scale_inv,
                               int scale_inv_stride, int n, int history_len, float fp8_max,
                               int margin, AmaxAlgo algo, Stream* s) override {
    calls_->history_slots += n;
    return CountingOps::UpdateFp8Scales(amax, history, scale, scale_inv, scale_inv_stride, n,
                                        history_len, fp8_max, margin, algo, s);
  }

 private:
  ScalingCalls* calls_;
};

struct RunRecord {
  std::vector<float> losses, grad_norms;
  std::vector<int64_t> history_slots, amax_reductions;  // per step
  std::vector<uint8_t> gradients;                       // after the last step
  std::vector<uint8_t> state;                           // the rank's checkpoint file
  int64_t allocated_bytes = 0;
  bool allocated_during_steps = true;
};

// `steps` steps of `spec` on one rank, then a checkpoint.
RunRecord TrainOneRank(const v1::JobSpec& spec, int steps) {
  RunRecord run;
  ScalingCalls calls;
  FsdpTrainer trainer(std::make_unique<ScalingCallCounter>(CreateCpuOps(), &calls),
                      CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  EXPECT_TRUE(setup.ok()) << setup.status();
  if (!setup.ok()) return run;
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  run.allocated_bytes = trainer.allocated_bytes();
  const int64_t allocations = trainer.allocation_count();
  for (int s = 0; s < steps; ++s) {
    const int64_t slots = calls.history_slots, reductions = calls.amax_reductions;
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return run;
    run.losses.push_back(report->loss);
    run.grad_norms.push_back(report->grad_norm);
    run.history_slots.push_back(calls.history_slots - slots);
    run.amax_reductions.push_back(calls.amax_reductions - reductions);
  }
  run.allocated_during_steps = trainer.allocation_count() != allocations;
  absl::StatusOr<std::vector<uint8_t>> gradients = trainer.GradientBytes();
  EXPECT_TRUE(gradients.ok());
  if (gradients.ok()) run.gradients = *std::move(gradients);
  const std::string root = FreshDir("state");
  absl::StatusOr<std::string> manifest = trainer.Checkpoint(steps, root);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  run.state = ReadBytes(StepDir(root, steps) + "/rank-0.state");
  EXPECT_FALSE(run.state.empty());
  return run;
}

v1::JobSpec WithRecompute(v1::JobSpec spec, v1::MemoryConfig::Recompute policy, int every) {
  spec.mutable_memory()->set_recompute(policy);
  spec.mutable_memory()->set_every_n_blocks(every);
  return spec;
}

// The tiny CPU job with three blocks (so that every other block leaves one
// block keeping everything between two that recompute) under `recipe`.
enum class Recipe { kDelayedFp8, kCurrentFp8, kBf16 };
v1::JobSpec ThreeBlockSpec(Recipe recipe) {
  v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  spec.mutable_model()->set_n_layers(3);
  if (recipe == Recipe::kCurrentFp8) spec.mutable_fp8()->mutable_current()->set_margin(0);
  if (recipe == Recipe::kBf16) spec.mutable_fp8()->set_disabled(true);
  return spec;
}

const char* RecipeName(Recipe r) {
  return r == Recipe::kDelayedFp8 ? "delayed FP8" : r == Recipe::kCurrentFp8 ? "current FP8" : "bf16";
}

struct Policy {
  v1::MemoryConfig::Recompute recompute;
  int every_n_blocks;
};

TEST(Recompute, EveryPolicyGivesTheBitsOfNoRecomputation) {
  const int steps = 20;
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8, Recipe::kBf16}) {
    SCOPED_TRACE(RecipeName(recipe));
    const v1::JobSpec spec = ThreeBlockSpec(recipe);
    const RunRecord plain = TrainOneRank(spec, steps);
    ASSERT_EQ(plain.losses.size(), static_cast<size_t>(steps));
    EXPECT_LT(plain.losses.back(), plain.losses.front());  // it trains
    for (const Policy policy : {Policy{v1::MemoryConfig::BLOCKS, 1},
                                Policy{v1::MemoryConfig::SELECTIVE, 1},
                                Policy{v1::MemoryConfig::BLOCKS, 2},
                                Policy{v1::MemoryConfig::SELECTIVE, 2}}) {
      SCOPED_TRACE(absl::StrCat(v1::MemoryConfig::Recompute_Name(policy.recompute), " every ",
                                policy.every_n_blocks));
      const RunRecord r = TrainOneRank(WithRecompute(spec, policy.recompute, policy.every_n_blocks),
                                 steps);
      ASSERT_EQ(r.losses.size(), static_cast<size_t>(steps));
      for (int s = 0; s < steps; ++s) {
        EXPECT_EQ(r.losses[s], plain.losses[s]) << "step " << s;
        EXPECT_EQ(r.grad_norms[s], plain.grad_norms[s]) << "step " << s;
        // The recomputed forward advances no history and measures no amax:
        // the amax histories move once per step.
        EXPECT_EQ(r.history_slots[s], plain.history_slots[s]) << "step " << s;
        EXPECT_EQ(r.amax_reductions[s], plain.amax_reductions[s]) << "step " << s;
      }
      EXPECT_EQ(r.gradients, plain.gradients);
      // Master weights, Adam moments, FP8 codes, scales and histories.
      EXPECT_EQ(r.state, plain.state);
      EXPECT_FALSE(r.allocated_during_steps);
      EXPECT_LT(r.allocated_bytes, plain.allocated_bytes);
    }
  }
}

TEST(Recompute, HistoriesAdvanceOncePerStepUnderEachRecipe) {
  // The counts themselves: delayed scaling rolls every slot once, at the
  // end of the step, and measures nothing before a cast; current scaling
  // also sets each activation and gradient slot once from its own amax.
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8}) {
    SCOPED_TRACE(RecipeName(recipe));
    const RunRecord r = TrainOneRank(
        WithRecompute(ThreeBlockSpec(recipe), v1::MemoryConfig::BLOCKS, 1), 2);
    ASSERT_EQ(r.history_slots.size(), 2u);
    const int64_t linears = 3 * 4, slots = 3 * linears;  // weight, input, gradient per linear
    if (recipe == Recipe::kDelayedFp8) {
      EXPECT_EQ(r.history_slots[1], slots);
      EXPECT_EQ(r.amax_reductions[1], 0);
    } else {
      EXPECT_EQ(r.history_slots[1], slots + 2 * linears);
      EXPECT_EQ(r.amax_reductions[1], 2 * linears);
    }
  }
}

// Two sharded ranks, resharding after forward (each block gathered again
// for its backward, which the recomputation reads too), in forked
// processes over Gloo.
int TrainRank(const v1::JobSpec& spec, int rank, const std::string& rdzv, const std::string& out,
              int steps) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  if (!trainer.Setup(spec, rank, 2).ok()) return 2;
  FileRendezvousStore store(rdzv);
  if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok()) return 3;
  std::ofstream file(out, std::ios::binary);
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepReport> report = trainer.RunStep(s);
    if (!report.ok()) return 4;
    file.write(reinterpret_cast<const char*>(&report->loss), sizeof(float));
    file.write(reinterpret_cast<const char*>(&report->grad_norm), sizeof(float));
  }
  for (int l = 0; l < spec.model().n_layers(); ++l) {
    absl::StatusOr<std::vector<uint8_t>> w = trainer.GatheredWeightBytes(l, BlockLinear::kDown);
    if (!w.ok()) return 5;
    file.write(reinterpret_cast<const char*>(w->data()), static_cast<std::streamsize>(w->size()));
  }
  return 0;
}

std::vector<std::vector<uint8_t>> TrainTwoRanks(const v1::JobSpec& spec, int steps) {
  const std::string dir = FreshDir("ranks");
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(TrainRank(spec, r, dir, absl::StrCat(dir, "/out-", r), steps));
    pids.push_back(pid);
  }
  std::vector<std::vector<uint8_t>> out;
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r;
    out.push_back(ReadBytes(absl::StrCat(dir, "/out-", r)));
  }
  return out;
}

TEST(Recompute, ShardedRanksThatGatherAgainInBackwardKeepTheirBits) {
  v1::JobSpec spec = ThreeBlockSpec(Recipe::kCurrentFp8);
  spec.mutable_data()->set_micro_batch_size(1);
  spec.set_reshard_after_forward(true);
  const std::vector<std::vector<uint8_t>> plain = TrainTwoRanks(spec, 8);
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_FALSE(plain[0].empty());
  for (const auto policy : {v1::MemoryConfig::BLOCKS, v1::MemoryConfig::SELECTIVE}) {
    SCOPED_TRACE(v1::MemoryConfig::Recompute_Name(policy));
    const std::vector<std::vector<uint8_t>> r = TrainTwoRanks(WithRecompute(spec, policy, 1), 8);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0], plain[0]);
    EXPECT_EQ(r[1], plain[1]);
  }
}

TEST(Recompute, SetupAllocatesTheEstimateAndEachPolicySavesMemory) {
  for (const Recipe recipe : {Recipe::kDelayedFp8, Recipe::kCurrentFp8, Recipe::kBf16}) {
    SCOPED_TRACE(RecipeName(recipe));
    v1::JobSpec spec = ThreeBlockSpec(recipe);
    int64_t activations[3] = {};
    int i = 0;
    for (const auto policy :
         {v1::MemoryConfig::NONE, v1::MemoryConfig::SELECTIVE, v1::MemoryConfig::BLOCKS}) {
      for (const int every : {1, 2, 3}) {
        const v1::JobSpec run = WithRecompute(spec, policy, every);
        for (const int world : {1, 3}) {
          FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
          ASSERT_TRUE(trainer.Setup(run, 1 % world, world).ok());
          const RankMemoryEstimate e = EstimateRankMemory(run, 1 % world, world);
          EXPECT_EQ(trainer.allocated_bytes(), e.trainer_bytes())
              << v1::MemoryConfig::Recompute_Name(policy) << " every " << every << " world "
              << world;
          EXPECT_EQ(e.activations_without_recompute,
                    EstimateRankMemory(spec, 1 % world, world).activations);
        }
      }
      activations[i++] = EstimateRankMemory(WithRecompute(spec, policy, 1), 0, 1).activations;
    }
    EXPECT_GT(activations[0], activations[1]);  // NONE > SELECTIVE
    EXPECT_GT(activations[1], activations[2]);  // SELECTIVE > BLOCKS
  }
}

}  // namespace
}  // namespace tessera

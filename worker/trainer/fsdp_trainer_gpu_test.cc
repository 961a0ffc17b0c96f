// A full training step on one GPU against the CPU reference engine: the same
// spec, seed and data give the same losses for the first steps within a
// stated tolerance (the engines differ only in summation order and
// atomics), and no engine allocation happens after setup. The job
// (test_job_spec.h) has head dim 64 and runs with grouped-query attention
// (2 query heads sharing 1 key/value head) and with multi-head attention,
// each with FP8 on and off. Those steps replay the captured step from the
// second on; a second test checks that replaying gives what queueing every
// kernel gives, bit for bit: losses, gradient norms and weights. A third
// checks bit-reproducible training: a rerun on fresh trainers and a run
// resumed from a checkpoint give the unbroken run's bits, and timed GEMM
// selection (the opt-out) still trains the same model to within rounding.
// A fourth checks that activation recomputation changes no bit, and a
// fifth that cuDNN's attention replays, repeats and trains alike.
// Needs a GPU.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/gpu_trainer_for_test.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

std::vector<float> Losses(Trainer& trainer, const v1::JobSpec& spec, int steps) {
  std::vector<float> losses;
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  absl::Status s = trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(60));
  EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < steps; ++i) {
    auto r = trainer.RunStep(i);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    losses.push_back(r->loss);
  }
  return losses;
}

TEST(FsdpTrainerGpu, OneGpuStepMatchesTheCpuEngine) {
  for (int kv_heads : {1, 2}) {
    for (bool fp8 : {true, false}) {
      SCOPED_TRACE(absl::StrCat("n_kv_heads=", kv_heads, " fp8=", fp8));
      v1::JobSpec spec = TestJobSpec(4);
      spec.mutable_model()->set_n_kv_heads(kv_heads);
      spec.mutable_fp8()->set_disabled(!fp8);
      FsdpTrainer cpu(CreateCpuOps(), CreateGlooCommunicator);
      std::unique_ptr<FsdpTrainer> gpu_trainer = GpuTrainerForTest();
      ASSERT_NE(gpu_trainer, nullptr);
      FsdpTrainer& gpu = *gpu_trainer;
      const int steps = 8;
      std::vector<float> want = Losses(cpu, spec, steps);
      const int64_t allocations = gpu.allocation_count();
      std::vector<float> got = Losses(gpu, spec, steps);
      ASSERT_EQ(got.size(), want.size());
      for (int i = 0; i < steps; ++i) {
        printf("n_kv_heads=%d fp8=%d step %d cpu %.6f gpu %.6f\n", kv_heads, fp8, i, want[i],
               got[i]);
        EXPECT_NEAR(got[i], want[i], (i == 0 ? 2e-3 : 2e-2) * want[i]) << "step " << i;
      }
      EXPECT_GT(gpu.allocation_count(), allocations);
      const int64_t after_setup = gpu.allocation_count();
      ASSERT_TRUE(gpu.RunStep(steps).ok());
      EXPECT_EQ(gpu.allocation_count(), after_setup);
    }
  }
}

// What a run leaves behind that a replayed step could get wrong: every
// step's report, and every block linear's compute bytes after the last step.
struct RunRecord {
  std::vector<StepReport> reports;
  std::vector<std::vector<uint8_t>> weights;
  bool replayed = false;
};

RunRecord TrainOnGpu(const v1::JobSpec& spec, int steps, const CudaEngineOptions& options = {}) {
  RunRecord record;
  std::unique_ptr<FsdpTrainer> trainer = GpuTrainerForTest(0, options);
  if (trainer == nullptr) return record;
  auto setup = trainer->Setup(spec, 0, 1);
  EXPECT_TRUE(setup.ok()) << setup.status();
  absl::Status s = trainer->InitCollective(nullptr, "127.0.0.1", absl::Seconds(60));
  EXPECT_TRUE(s.ok()) << s;
  if (!setup.ok() || !s.ok()) return record;
  int64_t allocations = 0, reads = 0;
  for (int i = 0; i < steps; ++i) {
    auto r = trainer->RunStep(i);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return record;
    record.reports.push_back(*r);
    if (i >= 1) {  // a warm step, captured or replayed, allocates nothing and reads one block
      EXPECT_EQ(trainer->allocation_count(), allocations) << "step " << i;
      EXPECT_EQ(trainer->host_read_count(), reads + 1) << "step " << i;
    }
    allocations = trainer->allocation_count();
    reads = trainer->host_read_count();
  }
  EXPECT_TRUE(trainer->step_graph_status().ok()) << trainer->step_graph_status();
  record.replayed = trainer->replays_step_graph();
  for (int layer = 0; layer < spec.model().n_layers(); ++layer) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      auto bytes = trainer->GatheredWeightBytes(layer, linear);
      EXPECT_TRUE(bytes.ok()) << bytes.status();
      if (bytes.ok()) record.weights.push_back(*std::move(bytes));
    }
  }
  return record;
}

TEST(FsdpTrainerGpu, ReplayedStepsMatchQueuedStepsBitForBit) {
  // A warmup-and-cosine schedule, so every step has its own learning rate
  // and bias corrections, which a replayed step reads from device memory.
  for (const char* recipe : {"delayed", "current", "bf16"}) {
    SCOPED_TRACE(recipe);
    v1::JobSpec spec = TestJobSpec(4);
    spec.mutable_optimizer()->set_schedule(v1::OptimizerConfig::COSINE);
    spec.mutable_optimizer()->set_warmup_steps(3);
    spec.set_steps(8);
    if (std::string(recipe) == "current") spec.mutable_fp8()->mutable_current();
    if (std::string(recipe) == "bf16") spec.mutable_fp8()->set_disabled(true);
    v1::JobSpec eager = spec;
    eager.set_disable_step_graph(true);
    const RunRecord queued = TrainOnGpu(eager, 8);
    const RunRecord replayed = TrainOnGpu(spec, 8);
    EXPECT_FALSE(queued.replayed);
    EXPECT_TRUE(replayed.replayed);
    ASSERT_EQ(queued.reports.size(), 8u);
    ASSERT_EQ(replayed.reports.size(), 8u);
    for (int i = 0; i < 8; ++i) {
      const StepReport& a = queued.reports[i];
      const StepReport& b = replayed.reports[i];
      EXPECT_EQ(a.loss, b.loss) << "step " << i;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << i;
      EXPECT_EQ(a.lr, b.lr) << "step " << i;
      EXPECT_EQ(a.tokens, b.tokens) << "step " << i;
      // The replay records the step's time marks too.
      EXPECT_GT(b.phases.forward_s, 0.0) << "step " << i;
      EXPECT_GT(b.phases.loss_s, 0.0) << "step " << i;
      EXPECT_GT(b.phases.backward_s, 0.0) << "step " << i;
      EXPECT_GT(b.phases.optimizer_s, 0.0) << "step " << i;
    }
    EXPECT_NE(queued.reports[2].lr, queued.reports[6].lr);
    // The capture is noted once, on the step that made it, for the job's log.
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(queued.reports[i].engine_note, "") << "step " << i;
      EXPECT_EQ(replayed.reports[i].engine_note.empty(), i != 1) << "step " << i;
      EXPECT_FALSE(replayed.reports[i].engine_note_is_warning) << "step " << i;
    }
    ASSERT_EQ(queued.weights.size(), replayed.weights.size());
    for (size_t w = 0; w < queued.weights.size(); ++w) {
      EXPECT_TRUE(queued.weights[w] == replayed.weights[w]) << "linear " << w;
    }
  }
}

// Activation recomputation on the GPU: BLOCKS and SELECTIVE give the bits
// of no recomputation (losses, gradient norms, weights), in FP8 with both
// recipes and in bf16, while the step is captured and replayed, and the
// recomputation is timed as its own phase.
TEST(FsdpTrainerGpu, RecomputationRepeatsTheBitsOfNoRecomputation) {
  for (const char* recipe : {"delayed", "current", "bf16"}) {
    SCOPED_TRACE(recipe);
    v1::JobSpec spec = TestJobSpec(4);
    spec.set_steps(6);
    if (std::string(recipe) == "current") spec.mutable_fp8()->mutable_current();
    if (std::string(recipe) == "bf16") spec.mutable_fp8()->set_disabled(true);
    const RunRecord plain = TrainOnGpu(spec, 6);
    ASSERT_EQ(plain.reports.size(), 6u);
    for (const auto policy : {v1::MemoryConfig::BLOCKS, v1::MemoryConfig::SELECTIVE}) {
      SCOPED_TRACE(v1::MemoryConfig::Recompute_Name(policy));
      v1::JobSpec recomputing = spec;
      recomputing.mutable_memory()->set_recompute(policy);
      const RunRecord r = TrainOnGpu(recomputing, 6);
      ASSERT_EQ(r.reports.size(), 6u);
      EXPECT_TRUE(r.replayed);
      for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(r.reports[i].loss, plain.reports[i].loss) << "step " << i;
        EXPECT_EQ(r.reports[i].grad_norm, plain.reports[i].grad_norm) << "step " << i;
        EXPECT_GT(r.reports[i].phases.recompute_s, 0.0) << "step " << i;
        EXPECT_EQ(plain.reports[i].phases.recompute_s, 0.0) << "step " << i;
      }
      ASSERT_EQ(r.weights.size(), plain.weights.size());
      for (size_t w = 0; w < r.weights.size(); ++w) {
        EXPECT_TRUE(r.weights[w] == plain.weights[w]) << "linear " << w;
      }
    }
  }
}

// One run of `spec` on a fresh GPU trainer: from step 0, or restored from
// the committed checkpoint of `first_step` under `root`; steps
// [first_step, end_step), then, if `checkpoint_at_end`, a checkpoint of
// end_step into `root`, committed as the coordinator would.
RunRecord TrainSegmentOnGpu(const v1::JobSpec& spec, int first_step, int end_step,
                            const std::string& root, bool checkpoint_at_end,
                            const CudaEngineOptions& options = {}) {
  RunRecord record;
  std::unique_ptr<FsdpTrainer> trainer = GpuTrainerForTest(0, options);
  if (trainer == nullptr) return record;
  absl::Status s = trainer->Setup(spec, 0, 1).status();
  if (s.ok() && first_step > 0) s = trainer->Restore(root, first_step);
  if (s.ok()) s = trainer->InitCollective(nullptr, "127.0.0.1", absl::Seconds(60));
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return record;
  for (int i = first_step; i < end_step; ++i) {
    auto r = trainer->RunStep(i);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return record;
    record.reports.push_back(*r);
  }
  if (checkpoint_at_end) {
    auto path = trainer->Checkpoint(end_step, root);
    EXPECT_TRUE(path.ok()) << path.status();
    EXPECT_TRUE(WriteCommitMarker(root, {end_step, 1}).ok());
  }
  for (int layer = 0; layer < spec.model().n_layers(); ++layer) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      auto bytes = trainer->GatheredWeightBytes(layer, linear);
      EXPECT_TRUE(bytes.ok()) << bytes.status();
      if (bytes.ok()) record.weights.push_back(*std::move(bytes));
    }
  }
  return record;
}

// Steps [first, first + b.reports.size()) of `a` against `b`, bit for bit,
// and (when both ran to the end) their final weights.
void ExpectSameBits(const RunRecord& a, const RunRecord& b, int first, const std::string& what) {
  ASSERT_GE(a.reports.size(), first + b.reports.size()) << what;
  for (size_t i = 0; i < b.reports.size(); ++i) {
    const int step = first + static_cast<int>(i);
    EXPECT_EQ(a.reports[step].loss, b.reports[i].loss) << what << ", step " << step;
    EXPECT_EQ(a.reports[step].grad_norm, b.reports[i].grad_norm) << what << ", step " << step;
  }
  if (a.reports.size() == first + b.reports.size()) {
    ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
    for (size_t w = 0; w < a.weights.size(); ++w) {
      EXPECT_TRUE(a.weights[w] == b.weights[w]) << what << ", linear " << w;
    }
  }
}

// cuDNN's attention (attention_kernels CUDNN) inside the captured
// step: replaying gives what queueing every kernel gives, a rerun repeats
// every bit (its deterministic backward), and it trains the same model as
// Tessera's kernels to within the engines' usual tolerance. Head dim 64 and
// 128, grouped-query and multi-head.
TEST(FsdpTrainerGpu, CudnnAttentionReplaysRepeatsAndTrainsLikeOurKernels) {
  for (const int head_dim : {64, 128}) {
    SCOPED_TRACE(absl::StrCat("head_dim=", head_dim));
    v1::JobSpec spec = TestJobSpec(4);
    spec.mutable_model()->set_n_kv_heads(head_dim == 64 ? 1 : 2);
    spec.mutable_model()->set_seq_len(256);
    spec.mutable_model()->set_d_model(head_dim * spec.model().n_heads());
    spec.set_steps(8);
    CudaEngineOptions cudnn;
    cudnn.attention = CudaEngineOptions::Attention::kCudnn;
    v1::JobSpec eager = spec;
    eager.set_disable_step_graph(true);
    const RunRecord ours = TrainOnGpu(spec, 8);
    const RunRecord replayed = TrainOnGpu(spec, 8, cudnn);
    const RunRecord again = TrainOnGpu(spec, 8, cudnn);
    const RunRecord queued = TrainOnGpu(eager, 8, cudnn);
    EXPECT_TRUE(replayed.replayed);
    ASSERT_EQ(replayed.reports.size(), 8u);
    ExpectSameBits(replayed, again, 0, "cuDNN rerun");
    ExpectSameBits(replayed, queued, 0, "cuDNN queued against replayed");
    ASSERT_EQ(ours.reports.size(), 8u);
    for (int i = 0; i < 8; ++i) {
      printf("head_dim %d step %d tessera %.6f cudnn %.6f\n", head_dim, i, ours.reports[i].loss,
             replayed.reports[i].loss);
      EXPECT_NEAR(replayed.reports[i].loss, ours.reports[i].loss, 2e-2 * ours.reports[i].loss)
          << "step " << i;
    }
  }
}

TEST(FsdpTrainerGpu, RerunsAndResumesRepeatTheBits) {
  // Big enough that cuBLASLt offers several algorithms per shape and the
  // embedding's ids (a dozen in 2048 tokens) cross its sorted chunks.
  v1::JobSpec base = TestJobSpec(8);
  v1::ModelConfig* m = base.mutable_model();
  m->set_seq_len(256);
  m->set_d_model(256);
  m->set_n_heads(4);
  m->set_n_kv_heads(2);
  m->set_ffn_dim(768);
  m->set_vocab_size(2048);
  base.set_loss_chunk_tokens(512);
  base.mutable_optimizer()->set_schedule(v1::OptimizerConfig::COSINE);
  base.mutable_optimizer()->set_warmup_steps(3);
  base.set_steps(8);
  const int steps = 8, middle = 4;
  static int run = 0;
  for (const char* recipe : {"delayed", "current", "bf16"}) {
    SCOPED_TRACE(recipe);
    v1::JobSpec spec = base;
    if (std::string(recipe) == "current") spec.mutable_fp8()->mutable_current();
    if (std::string(recipe) == "bf16") spec.mutable_fp8()->set_disabled(true);
    const std::string root =
        absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                     "/gpu-resume-", getpid(), "-", run++);
    mkdir(root.c_str(), 0755);
    const RunRecord unbroken = TrainSegmentOnGpu(spec, 0, steps, "", false);
    ASSERT_EQ(unbroken.reports.size(), size_t{steps});
    const RunRecord rerun = TrainSegmentOnGpu(spec, 0, steps, "", false);
    ExpectSameBits(unbroken, rerun, 0, "rerun");
    const RunRecord before = TrainSegmentOnGpu(spec, 0, middle, root, true);
    ExpectSameBits(unbroken, before, 0, "first half");
    const RunRecord resumed = TrainSegmentOnGpu(spec, middle, steps, root, false);
    ExpectSameBits(unbroken, resumed, middle, "resumed");

    // The opt-out: timed GEMM algorithms train the same model, up to rounding.
    CudaEngineOptions timed;
    timed.time_gemm_algorithms = true;
    const RunRecord tuned = TrainSegmentOnGpu(spec, 0, steps, "", false, timed);
    ASSERT_EQ(tuned.reports.size(), size_t{steps});
    for (int i = 0; i < steps; ++i) {
      EXPECT_NEAR(tuned.reports[i].loss, unbroken.reports[i].loss, 2e-2 * unbroken.reports[i].loss)
          << "step " << i;
    }
    printf("%s: final loss %.9g (rerun %.9g, resumed %.9g, timed GEMMs %.9g)\n", recipe,
           unbroken.reports.back().loss, rerun.reports.back().loss, resumed.reports.back().loss,
           tuned.reports.back().loss);
  }
}

}  // namespace
}  // namespace tessera

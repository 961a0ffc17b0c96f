// FsdpTrainer checkpoints on the CPU engine, ranks in forked processes over
// Gloo as in fsdp_trainer_test.cc:
//  - a run resumed at step k gives losses (and gathered FP8 weights)
//    bit-identical to an unbroken run, at 1 rank for delayed scaling, current
//    scaling and FP8 off, and at 2 ranks;
//  - hybrid sharding (2 x 2) writes one shard group's files, resumes
//    bit-identically and loads into plain FSDP at 3 ranks;
//  - resuming at another world size (2 -> 1 and 1 -> 2) re-slices the dim-0
//    shards: every gathered block weight is byte-identical to the saved run's,
//    and training goes on;
//  - a resume from an asynchronous checkpoint, written while later steps
//    changed the state, is bit-identical too; the size estimate is the
//    bytes the ranks write;
//  - a damaged state file is DATA_LOSS naming it, an uncommitted step is
//    NOT_FOUND, another job's checkpoint is FAILED_PRECONDITION, Restore out
//    of order is FAILED_PRECONDITION, and a failed write leaves no step
//    directory.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_layout.h"
#include "common/checkpoint_size.h"
#include "common/parallelism.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

std::string FreshDir(const std::string& name) {
  static int counter = 0;
  std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "-", getpid(), "-", counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// What one rank of a run saw: its losses, then every block linear's gathered
// (full) compute bytes after the last step.
struct RankRun {
  std::vector<float> losses;
  std::vector<std::vector<uint8_t>> gathered;
};

struct RunPlan {
  v1::JobSpec spec;
  int world = 1;
  std::string root;     // checkpoint root
  int restore_step = 0;  // 0: fresh start
  int first_step = 0, end_step = 0;
  bool checkpoint_at_end = false;
  // An asynchronous checkpoint taken before this step, whose write is held
  // back until every step of the run has changed the state it copied
  // (-1: none). The run is then committed at this step.
  int async_checkpoint_at = -1;
};

// One rank: setup, optional restore, steps, optional checkpoint, gather.
absl::StatusOr<RankRun> RunRank(const RunPlan& plan, int rank, const std::string& rdzv) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::Status s = trainer.Setup(plan.spec, rank, plan.world).status();
  if (s.ok() && plan.restore_step > 0) s = trainer.Restore(plan.root, plan.restore_step);
  if (!s.ok()) return s;
  FileRendezvousStore store(rdzv);
  if (s = trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)); !s.ok()) return s;
  RankRun run;
  absl::Notification release_write;
  trainer.set_checkpoint_write_hook_for_test([&] { release_write.WaitForNotification(); });
  for (int step = plan.first_step; step < plan.end_step; ++step) {
    if (step == plan.async_checkpoint_at) {
      absl::StatusOr<CheckpointStarted> started = trainer.StartCheckpoint(step, plan.root);
      if (!started.ok()) return started.status();
      if (!started->background) return absl::InternalError("the checkpoint was not asynchronous");
    }
    absl::StatusOr<StepReport> report = trainer.RunStep(step);
    if (!report.ok()) return report.status();
    run.losses.push_back(report->loss);
  }
  release_write.Notify();
  if (plan.async_checkpoint_at >= 0) {
    absl::StatusOr<CheckpointWritten> written = trainer.AwaitCheckpoint(plan.async_checkpoint_at);
    if (!written.ok()) return written.status();
  }
  if (plan.checkpoint_at_end) {
    if (absl::StatusOr<std::string> path = trainer.Checkpoint(plan.end_step, plan.root);
        !path.ok()) {
      return path.status();
    }
  }
  for (int layer = 0; layer < plan.spec.model().n_layers(); ++layer) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      absl::StatusOr<std::vector<uint8_t>> bytes = trainer.GatheredWeightBytes(layer, linear);
      if (!bytes.ok()) return bytes.status();
      run.gathered.push_back(*std::move(bytes));
    }
  }
  return run;
}

void WriteRun(const RankRun& run, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const int64_t n = run.losses.size(), g = run.gathered.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(reinterpret_cast<const char*>(run.losses.data()), n * sizeof(float));
  out.write(reinterpret_cast<const char*>(&g), 8);
  for (const auto& bytes : run.gathered) {
    const int64_t size = bytes.size();
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(bytes.data()), size);
  }
}

RankRun ReadRun(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RankRun run;
  int64_t n = 0, g = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  run.losses.resize(n);
  in.read(reinterpret_cast<char*>(run.losses.data()), n * sizeof(float));
  in.read(reinterpret_cast<char*>(&g), 8);
  run.gathered.resize(g);
  for (auto& bytes : run.gathered) {
    int64_t size = 0;
    in.read(reinterpret_cast<char*>(&size), 8);
    bytes.resize(size);
    in.read(reinterpret_cast<char*>(bytes.data()), size);
  }
  return run;
}

// Runs every rank of `plan` in a child process; a checkpointing run is then
// committed, as the coordinator does once every rank succeeded.
std::vector<RankRun> Run(const RunPlan& plan) {
  const std::string dir = FreshDir("run");
  std::vector<pid_t> pids;
  for (int r = 0; r < plan.world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      absl::StatusOr<RankRun> run = RunRank(plan, r, dir);
      if (!run.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, run.status().ToString().c_str());
        _exit(3);
      }
      WriteRun(*run, absl::StrCat(dir, "/out-", r));
      _exit(0);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (int r = 0; r < plan.world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r;
  }
  std::vector<RankRun> runs;
  if (!ok) return runs;
  for (int r = 0; r < plan.world; ++r) runs.push_back(ReadRun(absl::StrCat(dir, "/out-", r)));
  if (plan.checkpoint_at_end || plan.async_checkpoint_at >= 0) {
    v1::JobSpec job = plan.spec;
    job.set_world_size(plan.world);
    const int step = plan.checkpoint_at_end ? plan.end_step : plan.async_checkpoint_at;
    EXPECT_TRUE(WriteCommitMarker(plan.root, {step, CheckpointRanks(job)}).ok());
  }
  return runs;
}

// Trains `total` steps unbroken, and again as k steps, checkpoint, restore
// (in new processes) and the rest; the two must agree bit for bit.
void ExpectResumeIsExact(const v1::JobSpec& spec, int world, int k, int total) {
  RunPlan unbroken{spec, world, FreshDir("unused"), 0, 0, total, false};
  std::vector<RankRun> full = Run(unbroken);
  RunPlan first{spec, world, FreshDir("ckpt"), 0, 0, k, true};
  std::vector<RankRun> before = Run(first);
  RunPlan second{spec, world, first.root, k, k, total, false};
  std::vector<RankRun> after = Run(second);
  ASSERT_EQ(full.size(), static_cast<size_t>(world));
  ASSERT_EQ(before.size(), static_cast<size_t>(world));
  ASSERT_EQ(after.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::vector<float> resumed = before[r].losses;
    resumed.insert(resumed.end(), after[r].losses.begin(), after[r].losses.end());
    ASSERT_EQ(resumed.size(), full[r].losses.size());
    for (int s = 0; s < total; ++s) {
      // Bitwise, not approximately.
      EXPECT_EQ(std::memcmp(&resumed[s], &full[r].losses[s], sizeof(float)), 0)
          << "rank " << r << " step " << s << ": " << resumed[s] << " vs " << full[r].losses[s];
    }
    EXPECT_EQ(after[r].gathered, full[r].gathered) << "rank " << r;
  }
  // The loss moved after the checkpoint, so the restored state was used.
  EXPECT_NE(full[0].losses[k], full[0].losses[0]);
}

// An asynchronous checkpoint at step k, written only after the run has
// gone on to `total`: the run's losses are the unbroken run's (taking it
// changes nothing), and resuming from it is bit-identical, so the snapshot
// holds step k's state, not the state the later steps left behind.
void ExpectAsyncResumeIsExact(const v1::JobSpec& spec, int world, int k, int total) {
  RunPlan unbroken{spec, world, FreshDir("unused"), 0, 0, total, false};
  std::vector<RankRun> full = Run(unbroken);
  RunPlan with_checkpoint{spec, world, FreshDir("async"), 0, 0, total, false, k};
  std::vector<RankRun> through = Run(with_checkpoint);
  RunPlan resumed{spec, world, with_checkpoint.root, k, k, total, false};
  std::vector<RankRun> after = Run(resumed);
  ASSERT_EQ(full.size(), static_cast<size_t>(world));
  ASSERT_EQ(through.size(), static_cast<size_t>(world));
  ASSERT_EQ(after.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(through[r].losses.size(), full[r].losses.size());
    EXPECT_EQ(std::memcmp(through[r].losses.data(), full[r].losses.data(),
                          full[r].losses.size() * sizeof(float)),
              0)
        << "rank " << r << ": taking the checkpoint changed the run";
    ASSERT_EQ(after[r].losses.size(), static_cast<size_t>(total - k));
    for (int s = k; s < total; ++s) {
      EXPECT_EQ(std::memcmp(&after[r].losses[s - k], &full[r].losses[s], sizeof(float)), 0)
          << "rank " << r << " step " << s << ": " << after[r].losses[s - k] << " vs "
          << full[r].losses[s];
    }
    EXPECT_EQ(after[r].gathered, full[r].gathered) << "rank " << r;
  }
  EXPECT_NE(full[0].losses[total - 1], full[0].losses[k]);
}

TEST(FsdpCheckpoint, ResumeFromAnAsynchronousCheckpointIsBitIdentical) {
  v1::JobSpec spec = TinyCpuTestJobSpec(2);
  spec.mutable_checkpoint()->set_dir(FreshDir("async-root"));  // a snapshot is allocated
  ExpectAsyncResumeIsExact(spec, 1, 2, 6);
  v1::JobSpec two = TinyCpuTestJobSpec(1);
  two.mutable_checkpoint()->set_dir(FreshDir("async-root"));
  ExpectAsyncResumeIsExact(two, 2, 3, 6);
}

// checkpoint.synchronous: no snapshot; the files are durable when
// StartCheckpoint returns, and the resume is as exact.
TEST(FsdpCheckpoint, ASynchronousCheckpointIsWrittenBeforeTrainingGoesOn) {
  v1::JobSpec spec = TinyCpuTestJobSpec(2);
  const std::string root = FreshDir("sync");
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_synchronous(true);
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_TRUE(setup->warning.empty()) << setup->warning;
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  ASSERT_TRUE(trainer.RunStep(0).ok());
  absl::StatusOr<CheckpointStarted> started = trainer.StartCheckpoint(1, root);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_FALSE(started->background);
  EXPECT_EQ(started->bytes, EstimateCheckpointSize(spec).state_bytes);
  struct stat st;
  EXPECT_EQ(::stat(started->manifest_path.c_str(), &st), 0) << started->manifest_path;
  absl::StatusOr<CheckpointWritten> written = trainer.AwaitCheckpoint(1);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->manifest_path, started->manifest_path);
  EXPECT_EQ(trainer.AwaitCheckpoint(2).status().code(), absl::StatusCode::kFailedPrecondition);
  ExpectResumeIsExact(spec, 1, 2, 4);
}

// The size the coordinator checks free space against is what the ranks
// write: their state files, byte for byte.
TEST(FsdpCheckpoint, TheSizeEstimateIsTheBytesWritten) {
  for (int world : {1, 3}) {
    v1::JobSpec spec = TinyCpuGqaTestJobSpec(1, 2);
    spec.set_world_size(world);
    RunPlan save{spec, world, FreshDir("size"), 0, 0, 1, true};
    ASSERT_EQ(tessera::Run(save).size(), static_cast<size_t>(world));
    int64_t written = 0, with_manifests = 0;
    for (int r = 0; r < world; ++r) {
      struct stat st;
      ASSERT_EQ(::stat(absl::StrCat(save.root, "/step-1/rank-", r, ".state").c_str(), &st), 0);
      written += st.st_size;
      ASSERT_EQ(::stat(absl::StrCat(save.root, "/step-1/rank-", r, ".manifest").c_str(), &st), 0);
      with_manifests += st.st_size;
    }
    const CheckpointSize estimate = EstimateCheckpointSize(spec);
    EXPECT_EQ(estimate.state_bytes, written) << world << " ranks";
    EXPECT_GE(estimate.total_bytes, written + with_manifests) << world << " ranks";
  }
}

TEST(FsdpCheckpoint, OneRankResumeIsBitIdenticalForEveryFp8Recipe) {
  v1::JobSpec delayed = TinyCpuTestJobSpec(2);
  ExpectResumeIsExact(delayed, 1, 3, 6);
  v1::JobSpec current = delayed;
  current.mutable_fp8()->mutable_current();
  ExpectResumeIsExact(current, 1, 2, 5);
  v1::JobSpec bf16 = delayed;
  bf16.mutable_fp8()->set_disabled(true);
  ExpectResumeIsExact(bf16, 1, 3, 5);
}

TEST(FsdpCheckpoint, TwoRankResumeIsBitIdentical) {
  ExpectResumeIsExact(TinyCpuTestJobSpec(1), 2, 3, 6);
}

// Saves at `from` ranks after k steps, restores at `to` ranks: the gathered
// weights equal the saved ones byte for byte and training continues.
void ExpectReshardedResume(int from, int to) {
  const v1::JobSpec spec = TinyCpuGqaTestJobSpec(1, 2);  // qkv rows split unevenly
  const int k = 3;
  RunPlan save{spec, from, FreshDir("reshard"), 0, 0, k, true};
  std::vector<RankRun> saved = Run(save);
  RunPlan load{spec, to, save.root, k, k, k, false};  // no step: gather right after restore
  std::vector<RankRun> loaded = Run(load);
  ASSERT_EQ(saved.size(), static_cast<size_t>(from));
  ASSERT_EQ(loaded.size(), static_cast<size_t>(to));
  ASSERT_FALSE(saved[0].gathered.empty());
  for (int r = 0; r < to; ++r) EXPECT_EQ(loaded[r].gathered, saved[0].gathered) << "rank " << r;
  RunPlan train{spec, to, save.root, k, k, k + 2, false};
  std::vector<RankRun> trained = Run(train);
  ASSERT_EQ(trained.size(), static_cast<size_t>(to));
  for (float loss : trained[0].losses) EXPECT_TRUE(std::isfinite(loss) && loss < 10.f) << loss;
}

// Hybrid sharding (2 groups of 2): only the first group writes, the resume
// is bit-identical on every rank, and the checkpoint loads into plain FSDP
// at another world size with the same gathered weights.
void ExpectHybridCheckpointLoadsIntoPlainFsdp(const v1::JobSpec& hybrid) {
  RunPlan save{hybrid, 4, FreshDir("hsdp"), 0, 0, 2, true};
  std::vector<RankRun> saved = Run(save);
  ASSERT_EQ(saved.size(), 4u);
  DIR* step_dir = opendir(absl::StrCat(save.root, "/step-2").c_str());
  ASSERT_NE(step_dir, nullptr);
  int state_files = 0;
  while (dirent* e = readdir(step_dir)) {
    state_files += std::strstr(e->d_name, ".state") != nullptr ? 1 : 0;
  }
  closedir(step_dir);
  EXPECT_EQ(state_files, 2);
  v1::JobSpec plain = hybrid;
  plain.clear_parallelism();
  RunPlan load{plain, 3, save.root, 2, 2, 2, false};
  std::vector<RankRun> loaded = Run(load);
  ASSERT_EQ(loaded.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(loaded[r].gathered, saved[0].gathered) << "rank " << r;
}

TEST(FsdpCheckpoint, HybridShardingResumesExactlyAndReslicesIntoPlainFsdp) {
  v1::JobSpec hybrid = TinyCpuTestJobSpec(1);
  hybrid.mutable_parallelism()->set_shard_group_size(2);
  ExpectResumeIsExact(hybrid, 4, 2, 4);
  ExpectHybridCheckpointLoadsIntoPlainFsdp(hybrid);
}

TEST(FsdpCheckpoint, ResumingAtAnotherWorldSizeReslicesTheShards) {
  ExpectReshardedResume(2, 1);
  ExpectReshardedResume(1, 2);
  ExpectReshardedResume(2, 3);  // uneven and empty shards
}

// A 1-rank trainer at step 2 with a committed checkpoint under root.
std::string CommittedOneRankCheckpoint(const v1::JobSpec& spec) {
  const std::string root = FreshDir("bad");
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  EXPECT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  EXPECT_TRUE(trainer.RunStep(0).ok());
  EXPECT_TRUE(trainer.RunStep(1).ok());
  absl::StatusOr<std::string> path = trainer.Checkpoint(2, root);
  EXPECT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, StepDir(root, 2) + "/rank-0.manifest");
  EXPECT_TRUE(WriteCommitMarker(root, {2, 1}).ok());
  return root;
}

absl::Status RestoreInto(const v1::JobSpec& spec, const std::string& root, int step) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  if (absl::Status s = trainer.Setup(spec, 0, 1).status(); !s.ok()) return s;
  return trainer.Restore(root, step);
}

TEST(FsdpCheckpoint, RestoreRefusesDamagedMissingAndForeignCheckpoints) {
  const v1::JobSpec spec = TinyCpuTestJobSpec(1);
  const std::string root = CommittedOneRankCheckpoint(spec);
  EXPECT_TRUE(RestoreInto(spec, root, 2).ok());
  EXPECT_EQ(RestoreInto(spec, root, 3).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RestoreInto(spec, root, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RestoreInto(spec, root + "/../x", 2).code(), absl::StatusCode::kInvalidArgument);
  v1::JobSpec other = spec;
  other.set_seed(spec.seed() + 1);
  absl::Status foreign = RestoreInto(other, root, 2);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition) << foreign;

  const std::string state = StepDir(root, 2) + "/rank-0.state";
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    const char c = static_cast<char>(f.get());
    f.seekp(1000);
    f.put(static_cast<char>(c ^ 0x10));
  }
  absl::Status damaged = RestoreInto(spec, root, 2);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("rank-0.state"), absl::string_view::npos) << damaged;
  ASSERT_EQ(unlink(state.c_str()), 0);
  damaged = RestoreInto(spec, root, 2);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("rank-0.state"), absl::string_view::npos) << damaged;
}

// The manifest records the engine's numerics stack; a restore under another
// warns (and still restores), one under the same stack or from a manifest
// that predates the record says nothing.
TEST(FsdpCheckpoint, RestoreUnderAnotherNumericsStackWarns) {
  const v1::JobSpec spec = TinyCpuTestJobSpec(1);
  const std::string root = CommittedOneRankCheckpoint(spec);
  const std::string stack = CreateCpuOps()->NumericsStack();
  EXPECT_EQ(stack.rfind("CPU engine, ", 0), 0u) << stack;
  absl::StatusOr<RankManifest> manifest = ReadRankManifest(root, 2, 0);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->spec.numerics_stack, stack);

  const auto restore = [&](std::string* warning, std::string* note) {
    FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
    ASSERT_TRUE(trainer.Restore(root, 2).ok());
    *warning = trainer.restore_warning();
    *note = trainer.restore_note();
  };
  const auto rewrite_stack = [&](const std::string& recorded) {
    RankManifest m = *manifest;
    m.spec.numerics_stack = recorded;
    std::ofstream(StepDir(root, 2) + "/rank-0.manifest", std::ios::binary | std::ios::trunc)
        << EncodeManifest(m);
  };
  std::string warning, note;
  restore(&warning, &note);
  EXPECT_EQ(warning, "");

  rewrite_stack("CUDA runtime 13000, driver 13000, cuBLASLt 130100, cuDNN 91400, H100 (sm_90)");
  restore(&warning, &note);
  EXPECT_NE(warning.find("resumed from step 2 on another numerics stack"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("cuDNN 91400"), std::string::npos) << warning;
  EXPECT_NE(warning.find(stack), std::string::npos) << warning;
  EXPECT_EQ(note, "");  // the state itself loaded as saved

  rewrite_stack("");  // as a manifest from before the stack was recorded
  restore(&warning, &note);
  EXPECT_EQ(warning, "");
}

TEST(FsdpCheckpoint, RestoreOutOfOrderIsAFailedPrecondition) {
  const v1::JobSpec spec = TinyCpuTestJobSpec(1);
  const std::string root = CommittedOneRankCheckpoint(spec);
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  EXPECT_EQ(trainer.Restore(root, 2).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  EXPECT_EQ(trainer.Restore(root, 2).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FsdpCheckpoint, AFailedCheckpointLeavesNoStepDirectory) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  EXPECT_EQ(trainer.Checkpoint(0, FreshDir("early")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(trainer.Setup(TinyCpuTestJobSpec(1), 0, 1).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  ASSERT_TRUE(trainer.RunStep(0).ok());
  EXPECT_FALSE(trainer.Checkpoint(1, "/proc/forbidden").ok());
  // A root whose step directory cannot take files (read-only) fails cleanly.
  const std::string root = FreshDir("readonly");
  ASSERT_TRUE(CreateStepDir(root, 1).ok());
  ASSERT_EQ(chmod(StepDir(root, 1).c_str(), 0555), 0);
  if (access(StepDir(root, 1).c_str(), W_OK) != 0) {  // not when the test runs as root
    EXPECT_FALSE(trainer.Checkpoint(1, root).ok());
  }
  ASSERT_EQ(chmod(StepDir(root, 1).c_str(), 0755), 0);
  ASSERT_EQ(rmdir(StepDir(root, 1).c_str()), 0);
  // Still usable, and the write then succeeds.
  EXPECT_TRUE(trainer.Checkpoint(1, root).ok());
}

// Setup makes the checkpoint directory and its parents, so a job never
// trains for hours to fail at its first checkpoint; a path that cannot
// become a directory fails Setup itself, naming it, before any allocation.
TEST(FsdpCheckpoint, SetupMakesTheCheckpointDirectoryOrRefusesTheJob) {
  v1::JobSpec spec = TinyCpuTestJobSpec(1);
  const std::string base = FreshDir("setup-dirs");
  const std::string root = base + "/runs/team/job-1";
  spec.mutable_checkpoint()->set_dir(root);
  {
    FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
    ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
    struct stat st;
    ASSERT_EQ(stat(root.c_str(), &st), 0) << root;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
    ASSERT_TRUE(trainer.RunStep(0).ok());
    EXPECT_TRUE(trainer.Checkpoint(1, root).ok());
  }
  const std::string file = base + "/runs/notes.txt";
  std::ofstream(file) << "a file, not a directory";
  spec.mutable_checkpoint()->set_dir(file + "/job-2");
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::StatusOr<SetupReport> setup = trainer.Setup(spec, 0, 1);
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument) << setup.status();
  EXPECT_NE(setup.status().message().find("checkpoint.dir"), std::string::npos) << setup.status();
  EXPECT_NE(setup.status().message().find(file), std::string::npos) << setup.status();
  EXPECT_EQ(trainer.allocated_bytes(), 0);
}

}  // namespace
}  // namespace tessera

// A job resumed under another FP8 recipe than its checkpoint's, on the CPU
// engine (formats/checkpoint_compatibility.h, fsdp_checkpoint.cc):
//  - FP8 (delayed) -> bf16: the masters and Adam moments after Restore are
//    the saved ones bit for bit, the block linears' bf16 compute shards are
//    the masters rounded to bf16, the step and learning rate continue, and
//    the losses stay close to the unbroken FP8 run's;
//  - bf16 -> FP8: the FP8 codes are the masters quantized with the scale a
//    fresh job takes (448 / global amax of the master), the same bytes at 2
//    ranks as at 1 (the scales are agreed across ranks), and training goes
//    on close to the unbroken bf16 run;
//  - delayed -> current scaling and a new amax history length resume too;
//  - the restore note names the change, and an unchanged recipe has none;
//  - a checkpoint written before recipes were recorded (a version 1
//    manifest) resumes bit-identically under its own recipe and is refused
//    under another.
//
// Why the losses are compared with a tolerance: from the same masters the
// FP8 and bf16 steps differ only in how the four block linears round their
// operands (e4m3 keeps 3 mantissa bits, bf16 7), so the two runs' losses
// separate by quantization noise that grows slowly over a few steps. Over
// the 4 steps compared, every switched run here stayed within 0.05% of the
// unbroken run (largest seen: 0.043%, on the first step after the switch);
// the bound is 0.5%, ten times that, and still under the 1.4 to 4% one step
// of this model moves the loss here, so weights re-initialised (a fresh
// model's loss is about 9% higher), moments lost or codes decoded with a
// stale scale fail it. The bit-exact checks above catch the rest.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/sha256.h"
#include "formats/spec_hash.h"
#include "formats/checkpoint_io.h"
#include "formats/checkpoint_state.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/bf16.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/engine/cpu/fp8.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr float kLossTolerance = 0.005f;  // relative; see the file comment

std::string FreshDir(const std::string& name) {
  static int counter = 0;
  std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "-", getpid(), "-", counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

struct Trained {
  std::vector<float> losses, lrs;
  std::vector<std::vector<uint8_t>> gathered;  // every block linear, after the last step
  std::string note;                            // the restore note
};

struct Plan {
  v1::JobSpec spec;
  int world = 1;
  std::string restore_root;  // empty: a fresh start
  int first_step = 0, end_step = 0;
  std::string checkpoint_root;  // empty: none; else a checkpoint of end_step, committed
  // Empty: none; else a checkpoint of first_step right after InitCollective,
  // before any step: the state the restore produced.
  std::string restored_state_root;
};

absl::StatusOr<Trained> TrainRank(const Plan& plan, int rank, const std::string& rdzv) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  absl::Status s = trainer.Setup(plan.spec, rank, plan.world).status();
  if (s.ok() && !plan.restore_root.empty()) s = trainer.Restore(plan.restore_root, plan.first_step);
  if (!s.ok()) return s;
  Trained out;
  out.note = trainer.restore_note();
  FileRendezvousStore store(rdzv);
  if (s = trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)); !s.ok()) return s;
  if (!plan.restored_state_root.empty()) {
    absl::StatusOr<std::string> path = trainer.Checkpoint(plan.first_step, plan.restored_state_root);
    if (!path.ok()) return path.status();
  }
  for (int step = plan.first_step; step < plan.end_step; ++step) {
    absl::StatusOr<StepReport> report = trainer.RunStep(step);
    if (!report.ok()) return report.status();
    out.losses.push_back(report->loss);
    out.lrs.push_back(report->lr);
  }
  if (!plan.checkpoint_root.empty()) {
    absl::StatusOr<std::string> path = trainer.Checkpoint(plan.end_step, plan.checkpoint_root);
    if (!path.ok()) return path.status();
  }
  for (int layer = 0; layer < plan.spec.model().n_layers(); ++layer) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      absl::StatusOr<std::vector<uint8_t>> bytes = trainer.GatheredWeightBytes(layer, linear);
      if (!bytes.ok()) return bytes.status();
      out.gathered.push_back(*std::move(bytes));
    }
  }
  return out;
}

// Rank 0's result; every rank runs in a child process (Gloo needs one per
// rank), and the checkpoints written are committed as the coordinator would.
Trained Train(const Plan& plan) {
  const std::string dir = FreshDir("run");
  std::vector<pid_t> pids;
  for (int r = 0; r < plan.world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      absl::StatusOr<Trained> run = TrainRank(plan, r, dir);
      if (!run.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, run.status().ToString().c_str());
        _exit(3);
      }
      if (r == 0) {
        std::ofstream out(dir + "/rank-0", std::ios::binary);
        for (const std::vector<float>* v : {&run->losses, &run->lrs}) {
          const int64_t n = v->size();
          out.write(reinterpret_cast<const char*>(&n), 8);
          out.write(reinterpret_cast<const char*>(v->data()), n * 4);
        }
        const int64_t g = run->gathered.size(), note = run->note.size();
        out.write(reinterpret_cast<const char*>(&g), 8);
        for (const auto& bytes : run->gathered) {
          const int64_t size = bytes.size();
          out.write(reinterpret_cast<const char*>(&size), 8);
          out.write(reinterpret_cast<const char*>(bytes.data()), size);
        }
        out.write(reinterpret_cast<const char*>(&note), 8);
        out.write(run->note.data(), note);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  EXPECT_TRUE(ok) << "a rank failed";
  Trained run;
  if (!ok) return run;
  std::ifstream in(dir + "/rank-0", std::ios::binary);
  for (std::vector<float>* v : {&run.losses, &run.lrs}) {
    int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    v->resize(n);
    in.read(reinterpret_cast<char*>(v->data()), n * 4);
  }
  int64_t g = 0, note = 0;
  in.read(reinterpret_cast<char*>(&g), 8);
  run.gathered.resize(g);
  for (auto& bytes : run.gathered) {
    int64_t size = 0;
    in.read(reinterpret_cast<char*>(&size), 8);
    bytes.resize(size);
    in.read(reinterpret_cast<char*>(bytes.data()), size);
  }
  in.read(reinterpret_cast<char*>(&note), 8);
  run.note.resize(note);
  in.read(run.note.data(), note);
  v1::JobSpec job = plan.spec;
  job.set_world_size(plan.world);
  for (const auto& [root, step] : {std::make_pair(plan.checkpoint_root, plan.end_step),
                                   std::make_pair(plan.restored_state_root, plan.first_step)}) {
    if (!root.empty()) {
      EXPECT_TRUE(WriteCommitMarker(root, {step, plan.world}).ok());
    }
  }
  return run;
}

// Rank 0's state file of `step` under root (a 1-rank checkpoint).
SavedState ReadState(const std::string& root, int step) {
  SavedState state;
  absl::StatusOr<RankManifest> manifest = ReadRankManifest(root, step, 0);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  if (!manifest.ok()) return state;
  absl::StatusOr<std::string> bytes = ReadVerifiedFile(root, *manifest, StateFileName(0));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  state.bytes = *std::move(bytes);
  const absl::Status s = ParseState("state", state);
  EXPECT_TRUE(s.ok()) << s;
  return state;
}

bool IsBlockLinear(const std::string& name) {
  for (const char* suffix : {".qkv", ".out_proj", ".gate_up", ".down"}) {
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<float> Floats(const char* p, int64_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), p, n * 4);
  return v;
}

// The restored state (written before any step) against the checkpoint's:
// masters and moments identical, the compute shards of the other parameters
// identical, and each block linear's compute shard what `expect_compute`
// derives from its master.
void ExpectRestoredFrom(
    const SavedState& saved, const SavedState& restored,
    const std::function<void(const std::string&, const std::vector<float>&, const char*)>&
        expect_compute) {
  ASSERT_EQ(saved.params.size(), restored.params.size());
  EXPECT_EQ(restored.step, saved.step);
  EXPECT_EQ(restored.data_position, saved.data_position);
  for (size_t i = 0; i < saved.params.size(); ++i) {
    const SavedParam& a = saved.params[i];
    const SavedParam& b = restored.params[i];
    ASSERT_EQ(a.n, b.n);
    EXPECT_EQ(std::memcmp(a.master, b.master, a.n * 4), 0) << a.name;
    EXPECT_EQ(std::memcmp(a.exp_avg, b.exp_avg, a.n * 4), 0) << a.name;
    EXPECT_EQ(std::memcmp(a.exp_avg_sq, b.exp_avg_sq, a.n * 4), 0) << a.name;
    if (IsBlockLinear(a.name)) {
      expect_compute(a.name, Floats(b.master, b.n), b.compute);
    } else {
      EXPECT_EQ(b.dtype, kStateDTypeBFloat16) << a.name;
      EXPECT_EQ(std::memcmp(a.compute, b.compute, a.n * 2), 0) << a.name;
    }
  }
}

void ExpectLossesClose(const std::vector<float>& got, const std::vector<float>& reference) {
  ASSERT_EQ(got.size(), reference.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "step " << i;
    EXPECT_NEAR(got[i], reference[i], kLossTolerance * std::fabs(reference[i])) << "step " << i;
  }
}

constexpr int kSwitchAt = 4, kEnd = 8;

TEST(Fp8RecipeChange, Fp8ToBf16KeepsMastersAndMomentsAndCastsTheBlockLinears) {
  const v1::JobSpec fp8 = TinyCpuTestJobSpec(2);  // delayed scaling, history 4
  v1::JobSpec bf16 = fp8;
  bf16.mutable_fp8()->set_disabled(true);
  const std::string root = FreshDir("fp8");
  const Trained first = Train({fp8, 1, "", 0, kSwitchAt, root});
  const Trained unbroken = Train({fp8, 1, "", 0, kEnd});
  const std::string restored_root = FreshDir("restored");
  const Trained switched = Train({bf16, 1, root, kSwitchAt, kEnd, "", restored_root});

  EXPECT_EQ(switched.note,
            "resumed from step 4: FP8 recipe changed from delayed scaling (amax history 4) to "
            "disabled (bf16); master weights and Adam moments restored as saved, block linear "
            "weights cast to bf16 from the masters, FP8 amax histories and scales started fresh");
  ExpectRestoredFrom(ReadState(root, kSwitchAt), ReadState(restored_root, kSwitchAt),
                     [](const std::string& name, const std::vector<float>& master,
                        const char* compute) {
                       std::vector<uint16_t> want(master.size());
                       for (size_t i = 0; i < master.size(); ++i) want[i] = cpu::FloatToBf16(master[i]);
                       EXPECT_EQ(std::memcmp(want.data(), compute, want.size() * 2), 0) << name;
                     });
  // The step, schedule and data continue: steps 4..7, at the unbroken run's
  // learning rates, close to its losses.
  ASSERT_EQ(switched.losses.size(), static_cast<size_t>(kEnd - kSwitchAt));
  EXPECT_EQ(switched.lrs, std::vector<float>(unbroken.lrs.begin() + kSwitchAt, unbroken.lrs.end()));
  ExpectLossesClose(switched.losses,
                    std::vector<float>(unbroken.losses.begin() + kSwitchAt, unbroken.losses.end()));
  // The block linears now gather bf16 (2 bytes an element).
  EXPECT_EQ(switched.gathered[0].size(), 2 * unbroken.gathered[0].size());
  EXPECT_NE(switched.losses.back(), first.losses.front());
}

// The FP8 codes a fresh job encodes a master with: scale 448 / amax of the
// whole weight (margin 0), each element encoded at value * scale.
void ExpectFreshlyQuantized(const std::string& name, const std::vector<float>& master,
                            const char* compute) {
  float amax = 0.f;
  for (float v : master) amax = std::max(amax, std::fabs(v));
  ASSERT_GT(amax, 0.f) << name;
  const float scale = 448.f / amax;
  int mismatches = 0;
  for (size_t i = 0; i < master.size(); ++i) {
    mismatches += cpu::EncodeE4M3(master[i] * scale) != static_cast<uint8_t>(compute[i]);
  }
  EXPECT_EQ(mismatches, 0) << name;
}

TEST(Fp8RecipeChange, Bf16ToFp8QuantizesTheMastersWithFreshScalesAgreedAcrossRanks) {
  v1::JobSpec bf16 = TinyCpuTestJobSpec(2);
  bf16.mutable_fp8()->set_disabled(true);
  const v1::JobSpec fp8 = TinyCpuTestJobSpec(2);
  const std::string root = FreshDir("bf16");
  Train({bf16, 1, "", 0, kSwitchAt, root});
  const Trained unbroken = Train({bf16, 1, "", 0, kEnd});
  const std::string restored_root = FreshDir("restored");
  const Trained switched = Train({fp8, 1, root, kSwitchAt, kEnd, "", restored_root});
  EXPECT_NE(switched.note.find("FP8 recipe changed from disabled (bf16) to delayed scaling "
                               "(amax history 4); master weights and Adam moments restored as "
                               "saved, block linear weights quantized from the masters with "
                               "fresh scales"),
            std::string::npos)
      << switched.note;
  ExpectRestoredFrom(ReadState(root, kSwitchAt), ReadState(restored_root, kSwitchAt),
                     ExpectFreshlyQuantized);
  EXPECT_EQ(switched.lrs, std::vector<float>(unbroken.lrs.begin() + kSwitchAt, unbroken.lrs.end()));
  ExpectLossesClose(switched.losses,
                    std::vector<float>(unbroken.losses.begin() + kSwitchAt, unbroken.losses.end()));

  // At 2 ranks (the checkpoint re-sliced) each rank quantizes its shard
  // with the scale of the global amax: no step run, the gathered weights
  // are the 1-rank restore's byte for byte.
  const Trained one = Train({fp8, 1, root, kSwitchAt, kSwitchAt});
  const Trained two = Train({fp8, 2, root, kSwitchAt, kSwitchAt});
  ASSERT_FALSE(one.gathered.empty());
  EXPECT_EQ(one.gathered, two.gathered);
  EXPECT_EQ(one.gathered[0].size() * 2, unbroken.gathered[0].size());
}

TEST(Fp8RecipeChange, DelayedToCurrentScalingAndANewHistoryLengthResume) {
  const v1::JobSpec delayed = TinyCpuTestJobSpec(2);
  const std::string root = FreshDir("delayed");
  Train({delayed, 1, "", 0, kSwitchAt, root});
  const Trained unbroken = Train({delayed, 1, "", 0, kEnd});

  v1::JobSpec current = delayed;
  current.mutable_fp8()->mutable_current();
  v1::JobSpec longer = delayed;
  longer.mutable_fp8()->mutable_delayed()->set_amax_history_len(16);
  for (const v1::JobSpec& spec : {current, longer}) {
    const std::string restored_root = FreshDir("restored");
    const Trained switched = Train({spec, 1, root, kSwitchAt, kEnd, "", restored_root});
    EXPECT_NE(switched.note.find("FP8 recipe changed from delayed scaling (amax history 4) to "),
              std::string::npos)
        << switched.note;
    ExpectRestoredFrom(ReadState(root, kSwitchAt), ReadState(restored_root, kSwitchAt),
                       ExpectFreshlyQuantized);
    ExpectLossesClose(switched.losses, std::vector<float>(unbroken.losses.begin() + kSwitchAt,
                                                          unbroken.losses.end()));
  }
  // And back from current scaling to delayed.
  const std::string current_root = FreshDir("current");
  Train({current, 1, "", 0, kSwitchAt, current_root});
  const Trained back = Train({delayed, 1, current_root, kSwitchAt, kEnd});
  EXPECT_NE(back.note.find("from current scaling to delayed scaling (amax history 4)"),
            std::string::npos)
      << back.note;
  ASSERT_EQ(back.losses.size(), static_cast<size_t>(kEnd - kSwitchAt));
  for (float loss : back.losses) EXPECT_TRUE(std::isfinite(loss));
}

// A resume under the recipe the checkpoint was written with is exact and
// says nothing, also when the recipe is spelled differently (the default
// history length written out).
TEST(Fp8RecipeChange, AnUnchangedRecipeLeavesNoNote) {
  v1::JobSpec spec = TinyCpuTestJobSpec(2);
  spec.mutable_fp8()->mutable_delayed()->set_amax_history_len(0);
  const std::string root = FreshDir("same");
  Train({spec, 1, "", 0, kSwitchAt, root});
  v1::JobSpec spelled = spec;
  spelled.mutable_fp8()->mutable_delayed()->set_amax_history_len(16);
  const Trained resumed = Train({spelled, 1, root, kSwitchAt, kSwitchAt + 2});
  EXPECT_EQ(resumed.note, "");
  const Trained unbroken = Train({spec, 1, "", 0, kSwitchAt + 2});
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(std::memcmp(resumed.losses.data(), unbroken.losses.data() + kSwitchAt, 8), 0);
}

// Rewrites rank 0's manifest of `step` as one written before recipes were
// recorded: version 1, the hash that covered fp8, no spec lines.
void MakeVersionOneManifest(const std::string& root, int step, const v1::JobSpec& spec) {
  absl::StatusOr<RankManifest> m = ReadRankManifest(root, step, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  std::string body = absl::StrCat("tessera-rank-manifest 1\nstep ", step, "\nrank 0\nworld_size 1",
                                  "\nspec_hash ", LegacyCheckpointSpecHash(spec), "\n");
  for (const ManifestEntry& f : m->files) {
    absl::StrAppend(&body, "file ", f.size, " ", f.sha256, " ", f.name, "\n");
  }
  std::ofstream(StepDir(root, step) + "/" + RankManifestName(0), std::ios::trunc)
      << body << "sha256 " << Sha256Hex(body) << "\n";
  absl::StatusOr<RankManifest> rewritten = ReadRankManifest(root, step, 0);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  ASSERT_EQ(rewritten->version, 1);
}

TEST(Fp8RecipeChange, AVersionOneCheckpointResumesOnlyUnderItsOwnRecipe) {
  const v1::JobSpec spec = TinyCpuTestJobSpec(2);
  const std::string root = FreshDir("v1");
  Train({spec, 1, "", 0, kSwitchAt, root});
  MakeVersionOneManifest(root, kSwitchAt, spec);
  const Trained resumed = Train({spec, 1, root, kSwitchAt, kSwitchAt + 2});
  EXPECT_EQ(resumed.note, "");
  const Trained unbroken = Train({spec, 1, "", 0, kSwitchAt + 2});
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(std::memcmp(resumed.losses.data(), unbroken.losses.data() + kSwitchAt, 8), 0);

  v1::JobSpec bf16 = spec;
  bf16.mutable_fp8()->set_disabled(true);
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(bf16, 0, 1).ok());
  const absl::Status s = trainer.Restore(root, kSwitchAt);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("predates checkpoints that record their spec and FP8 recipe"),
            absl::string_view::npos)
      << s;
}

// Another model is still refused, naming the field, whatever the recipe.
TEST(Fp8RecipeChange, AnotherModelIsStillRefusedNamingTheField) {
  const v1::JobSpec spec = TinyCpuTestJobSpec(1);
  const std::string root = FreshDir("model");
  Train({spec, 1, "", 0, 2, root});
  v1::JobSpec wider = spec;
  wider.mutable_model()->set_ffn_dim(64);
  wider.mutable_fp8()->set_disabled(true);
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(wider, 0, 1).ok());
  const absl::Status s = trainer.Restore(root, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("model.ffn_dim: the checkpoint has 48, this job 64"),
            absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace tessera

// On the CUDA engine, an evaluation writes no gradient buffer: after two
// steps (the second captured in a CUDA graph at one rank) every gradient
// shard of every parameter and every full-size gradient the step
// reduce-scatters from is byte-identical before and after Evaluate(), at
// one GPU and, on a machine with two, at two ranks over NCCL. Each run is
// a child process (CUDA must not be initialised before fork). Needs a GPU;
// the two-rank case is skipped with fewer than two.
#include <cuda_runtime.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "common/synthetic_task.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/gpu_trainer_for_test.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr int kTooFewGpus = 77;

// One rank: two steps, then the gradient bytes around an evaluation.
// Writes "same" or "changed" and the count of nonzero gradient bytes.
int RunRank(int rank, int world, const v1::JobSpec& spec, const std::string& dir) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < world) return kTooFewGpus;
  std::unique_ptr<FsdpTrainer> made = GpuTrainerForTest(/*device=*/rank);
  if (made == nullptr) return 2;
  FsdpTrainer& trainer = *made;
  if (!trainer.Setup(spec, rank, world).ok()) return 3;
  FileRendezvousStore store(dir);
  if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(60)).ok()) return 4;
  for (int step = 0; step < 2; ++step) {
    if (!trainer.RunStep(step).ok()) return 5;
  }
  auto before = trainer.GradientBytes();
  if (!before.ok()) return 6;
  auto report = trainer.Evaluate();
  if (!report.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, report.status().ToString().c_str());
    return 7;
  }
  auto after = trainer.GradientBytes();
  if (!after.ok()) return 8;
  std::ofstream out(absl::StrCat(dir, "/grads-", rank));
  out << (*before == *after ? "same" : "changed") << " "
      << std::count_if(before->begin(), before->end(), [](uint8_t b) { return b != 0; }) << "\n";
  return 0;
}

void ExpectNoGradientWritten(int world) {
  v1::JobSpec spec = TestJobSpec(world == 1 ? 4 : 2);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(AdditionTokenFile("gpu-grad-validation", 99, 50000));
  v->set_eval_interval_steps(1);
  v->set_eval_batches(2);
  const std::string dir = TestDir(absl::StrCat("eval-grads-gpu-", world));
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) _exit(RunRank(r, world, spec, dir));
    pids.push_back(pid);
  }
  std::vector<int> codes(world);
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  }
  if (codes[0] == kTooFewGpus) GTEST_SKIP() << "needs " << world << " GPUs";
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(codes[r], 0) << "rank " << r;
    std::ifstream in(absl::StrCat(dir, "/grads-", r));
    std::string verdict;
    int64_t nonzero = 0;
    in >> verdict >> nonzero;
    EXPECT_GT(nonzero, 0) << "rank " << r << ": the steps left every gradient at zero";
    EXPECT_EQ(verdict, "same") << "rank " << r << ": the evaluation wrote a gradient buffer";
  }
}

TEST(EvaluateGradientsGpu, OneGpu) { ExpectNoGradientWritten(1); }

TEST(EvaluateGradientsGpu, TwoGpus) { ExpectNoGradientWritten(2); }

}  // namespace
}  // namespace tessera

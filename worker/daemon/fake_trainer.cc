// Test-only Trainer (see fake_trainer.h).
#include "worker/daemon/fake_trainer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {
namespace {

absl::Mutex threads_mu;
std::set<std::thread::id>& Threads() {
  static auto* threads = new std::set<std::thread::id>();
  return *threads;
}

}  // namespace

void FakeTrainer::Note() {
  absl::MutexLock lock(&threads_mu);
  Threads().insert(std::this_thread::get_id());
}

std::set<std::thread::id> FakeTrainer::CallingThreads() {
  absl::MutexLock lock(&threads_mu);
  return Threads();
}

void FakeTrainer::ResetCallingThreads() {
  absl::MutexLock lock(&threads_mu);
  Threads().clear();
}

absl::StatusOr<SetupReport> FakeTrainer::Setup(const v1::JobSpec& spec, int rank, int world_size) {
  Note();
  rank_ = rank;
  tokens_per_step_ = spec.data().micro_batch_size() * spec.model().seq_len();
  return SetupReport{1000 / world_size, 1000};
}

absl::Status FakeTrainer::InitCollective(RendezvousStore*, const std::string&, absl::Duration) {
  Note();
  if (aborted_) return absl::AbortedError("aborted during InitCollective");
  return absl::OkStatus();
}

absl::StatusOr<StepReport> FakeTrainer::RunStep(int step) {
  Note();
  absl::Time end = absl::Now() + options_.step_time;
  while (absl::Now() < end) {
    if (aborted_) return absl::AbortedError(absl::StrCat("step ", step, " aborted"));
    absl::SleepFor(std::min(options_.step_time, absl::Milliseconds(1)));
  }
  if (step == options_.fail_at_step) {
    return absl::Status(options_.fail_code, absl::StrCat("injected failure at step ", step));
  }
  StepReport report;
  report.step = step;
  report.loss = 5.0f * std::exp(-0.05f * step);
  report.grad_norm = 1.0f;
  report.lr = 1e-3f;
  report.tokens = tokens_per_step_;
  report.compute_time_s = absl::ToDoubleSeconds(options_.step_time);
  return report;
}

absl::StatusOr<std::string> FakeTrainer::Checkpoint(int step, const std::string& dir) {
  Note();
  return absl::StrCat(dir, "/step-", step, "/rank-", rank_, ".bin");
}

}  // namespace tessera

// Test-only Trainer (see fake_trainer.h).
#include "worker/daemon/fake_trainer.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <string>
#include <vector>

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
  world_size_ = world_size;
  tokens_per_step_ = spec.data().micro_batch_size() * spec.model().seq_len();
  if (spec.data().has_validation()) {
    eval_tokens_ = int64_t{tokens_per_step_} * spec.data().validation().eval_batches() * world_size;
  }
  const absl::Time end = absl::Now() + options_.setup_time;
  while (absl::Now() < end) {
    if (aborted_) return absl::CancelledError("setup aborted");
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (options_.setup_throws_bad_alloc) throw std::bad_alloc();
  if (options_.setup_fail_code != absl::StatusCode::kOk) {
    return absl::Status(options_.setup_fail_code, "injected setup failure");
  }
  return SetupReport{1000 / world_size, 1000};
}

absl::Status FakeTrainer::InitCollective(RendezvousStore* store, const std::string& host,
                                         absl::Duration timeout) {
  Note();
  if (aborted_) return absl::AbortedError("aborted during InitCollective");
  if (!options_.exchange_hosts) return absl::OkStatus();
  absl::Status set = store->Set(absl::StrCat("host/", rank_), host);
  if (!set.ok()) return set;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(absl::StrCat("host/", r));
  absl::StatusOr<std::vector<std::string>> hosts = store->Get(keys, timeout);
  if (!hosts.ok()) return absl::AbortedError(hosts.status().ToString());
  return absl::OkStatus();
}

absl::StatusOr<StepReport> FakeTrainer::RunStep(int step) {
  Note();
  if (step < restored_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, " is before the restored step ", restored_step_));
  }
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
  report.peak_memory_bytes = int64_t{64} << 20;
  if (step == options_.note_at_step) {
    report.engine_note = options_.note;
    report.engine_note_is_warning = options_.note_is_warning;
  }
  steps_done_ = step + 1;
  return report;
}

absl::StatusOr<ValidationReport> FakeTrainer::Evaluate() {
  Note();
  if (eval_tokens_ == 0) return absl::FailedPreconditionError("Evaluate: no data.validation");
  if (aborted_) return absl::AbortedError("evaluation aborted");
  return ValidationReport{5.5f * std::exp(-0.05f * steps_done_), eval_tokens_};
}

absl::StatusOr<CheckpointStarted> FakeTrainer::StartCheckpoint(int step, const std::string& dir) {
  Note();
  CheckpointStarted started;
  started.manifest_path = absl::StrCat(dir, "/step-", step, "/rank-", rank_, ".bin");
  started.bytes = kCheckpointBytes;
  absl::MutexLock lock(&checkpoint_mu_);
  last_checkpoint_ = {step, started.manifest_path};
  return started;
}

absl::StatusOr<CheckpointWritten> FakeTrainer::AwaitCheckpoint(int step) {
  absl::MutexLock lock(&checkpoint_mu_);
  if (!last_checkpoint_.has_value() || last_checkpoint_->first != step) {
    return absl::FailedPreconditionError(
        absl::StrCat("no checkpoint of step ", step, " was started on this rank"));
  }
  return CheckpointWritten{last_checkpoint_->second, kCheckpointBytes, 0.0};
}

absl::Status FakeTrainer::Restore(const std::string& dir, int step) {
  Note();
  if (options_.restore_fail_code != absl::StatusCode::kOk) {
    return absl::Status(options_.restore_fail_code,
                        absl::StrCat("fake restore of step ", step, " from ", dir, " failed"));
  }
  restored_step_ = step;
  return absl::OkStatus();
}

}  // namespace tessera

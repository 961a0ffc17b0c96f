// A test-only Trainer for the control-plane tests: no compute, a fixed
// per-step delay, a loss that falls (and a validation loss that follows
// it), optional failure at a chosen step, and
// Abort honoured mid-step. It also records the threads it was called on, so
// tests can check that every call ran on the worker's compute thread.
// Never linked into a shipped binary.
#ifndef TESSERA_WORKER_DAEMON_FAKE_TRAINER_H_
#define TESSERA_WORKER_DAEMON_FAKE_TRAINER_H_

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/trainer/trainer.h"

namespace tessera {

struct FakeTrainerOptions {
  absl::Duration step_time = absl::Milliseconds(5);
  int fail_at_step = -1;  // RunStep(fail_at_step) returns fail_code
  absl::StatusCode fail_code = absl::StatusCode::kAborted;
  absl::Duration setup_time = absl::ZeroDuration();  // Setup waits this long (abortable)
  absl::StatusCode setup_fail_code = absl::StatusCode::kOk;  // Setup fails with it unless OK
  bool setup_throws_bad_alloc = false;  // Setup throws as an allocation the host refuses would
  // InitCollective publishes `host` under "host/<rank>" and waits for every
  // rank's entry, as a real collective bootstrap would.
  bool exchange_hosts = false;
  absl::StatusCode restore_fail_code = absl::StatusCode::kOk;  // Restore fails with it unless OK
  std::string restore_warning;  // what restore_warning() says after a Restore
  // RunStep(note_at_step) reports `note` as its engine note.
  int note_at_step = -1;
  std::string note;
  bool note_is_warning = false;
};

class FakeTrainer : public Trainer {
 public:
  explicit FakeTrainer(FakeTrainerOptions options = {}) : options_(options) { Note(); }
  ~FakeTrainer() override { Note(); }

  absl::StatusOr<SetupReport> Setup(const v1::JobSpec& spec, int rank, int world_size) override;
  absl::Status InitCollective(RendezvousStore* store, const std::string& host,
                              absl::Duration timeout) override;
  absl::StatusOr<StepReport> RunStep(int step) override;
  // Writes nothing: the "write" is done when StartCheckpoint returns, and
  // AwaitCheckpoint reports it (a path under dir, `checkpoint_bytes`).
  absl::StatusOr<CheckpointStarted> StartCheckpoint(int step, const std::string& dir) override;
  absl::StatusOr<CheckpointWritten> AwaitCheckpoint(int step) override;
  // Records the step (a RunStep before it then fails). Fails with
  // restore_fail_code when that is set.
  absl::Status Restore(const std::string& dir, int step) override;
  // A validation loss that follows the training loss's curve (a little
  // above it, at the steps done so far), over eval_batches x micro-batch x
  // seq_len tokens per rank. FAILED_PRECONDITION without data.validation.
  absl::StatusOr<ValidationReport> Evaluate() override;
  void Abort() override { aborted_ = true; }
  std::string restore_warning() const override {
    return restored_step_ >= 0 ? options_.restore_warning : std::string();
  }

  // Threads that made calls, other than Abort (shared by every FakeTrainer).
  static std::set<std::thread::id> CallingThreads();
  static void ResetCallingThreads();

 private:
  static void Note();
  FakeTrainerOptions options_;
  std::atomic<bool> aborted_{false};
  int rank_ = 0;
  int world_size_ = 1;
  int tokens_per_step_ = 0;
  int restored_step_ = -1;
  int steps_done_ = 0;
  int64_t eval_tokens_ = 0;  // over all ranks; 0 without data.validation
  static constexpr int64_t kCheckpointBytes = 1000;  // what a checkpoint reports
  absl::Mutex checkpoint_mu_;
  std::optional<std::pair<int, std::string>> last_checkpoint_ ABSL_GUARDED_BY(checkpoint_mu_);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_FAKE_TRAINER_H_

// Test-only in-memory WorkerConnection: answers every command, streams step
// results with a configurable delay (or each twice), can fail a chosen
// command, step or checkpoint, can hang until cancelled (a stuck worker),
// and can answer as a dead worker (or answer Abort as a stuck one) would.
// HoldSteps and EndChunkAt act on its RunSteps as on a real worker's: a
// held rank begins no step, and a chunk ends before the limit (a limit the
// rank has begun is FAILED_PRECONDITION).
// Its checkpoints leave a (empty) rank manifest on disk once the background
// write is awaited, as a worker's would (a write can be made slow, held
// until a test releases it, or failed),
// and after the steps the spec's data.validation names it reports a
// validation loss (3.5 - 0.01 * step over 40 tokens), as a worker's would,
// and after every fp8.shadow_interval_steps-th step a shadow loss (FP8
// 3.02 - 0.01 * step, bf16 3.0 - 0.01 * step over 50 tokens, taking
// 1 ms * (rank + 1)).
// Records the commands it saw.
#ifndef TESSERA_SERVER_FAKE_WORKER_CONNECTION_H_
#define TESSERA_SERVER_FAKE_WORKER_CONNECTION_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/checkpoint_layout.h"
#include "common/durable_file.h"
#include "common/evaluation_schedule.h"
#include "common/status_macros.h"
#include "server/worker_connection.h"

namespace tessera {

struct FakeWorkerBehavior {
  absl::Duration step_time = absl::Milliseconds(1);
  int fail_at_step = -1;         // RunSteps fails with ABORTED at this step
  bool fail_setup = false;       // SetupJob fails with RESOURCE_EXHAUSTED
  bool hang_in_run = false;      // RunSteps blocks until CancelInFlight
  bool duplicate_results = false;  // every StepResult is streamed twice
  int fail_checkpoint_at = -1;     // Checkpoint of this step fails (RESOURCE_EXHAUSTED)
  // The background write of this step fails (AwaitCheckpoint answers
  // RESOURCE_EXHAUSTED), and how long every write takes.
  int fail_checkpoint_write_at = -1;
  absl::StatusCode checkpoint_write_fail_code = absl::StatusCode::kResourceExhausted;
  absl::Duration checkpoint_write_time = absl::ZeroDuration();
  // When set, every background write waits for it (at most 30 s, then fails
  // DEADLINE_EXCEEDED), so a test decides when writes finish.
  std::shared_ptr<absl::Notification> checkpoint_write_gate;
  absl::Duration checkpoint_time = absl::ZeroDuration();  // each Checkpoint takes this long
  // Abort answers with this code: UNAVAILABLE as a dead worker's refused
  // connection, DEADLINE_EXCEEDED as a worker stuck in a collective.
  absl::StatusCode abort_code = absl::StatusCode::kOk;
  // Every command fails UNAVAILABLE, as for a worker process that died.
  bool unreachable = false;
  // Of each step's reported time, this much was spent waiting on
  // collectives (StepPhases.collective_s).
  absl::Duration collective_wait = absl::ZeroDuration();
  // GetJobLogs answers these lines (for any job, with this connection's
  // rank, sequence from 1 and times 1 ms apart from time_unix_ms 1000).
  std::vector<std::string> log_messages;
};

class FakeWorkerConnection : public WorkerConnection {
 public:
  FakeWorkerConnection(int rank, FakeWorkerBehavior behavior) : rank_(rank), behavior_(behavior) {}

  // Like a real worker, it reports the rank SetupJob gave it.
  absl::StatusOr<v1::SetupJobResponse> SetupJob(const v1::SetupJobRequest& r) override {
    Record("SetupJob");
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    rank_ = r.rank();
    {
      absl::MutexLock lock(&mu_);
      resume_step_ = r.resume_step();
      steps_begun_ = r.resume_step();
      spec_ = r.spec();
    }
    if (behavior_.fail_setup) return absl::ResourceExhaustedError("out of memory");
    return v1::SetupJobResponse();
  }
  absl::Status InitCollective(const v1::InitCollectiveRequest&) override {
    Record("InitCollective");
    return cancelled_ ? absl::CancelledError("cancelled") : absl::OkStatus();
  }
  absl::Status RunSteps(const v1::RunStepsRequest& r,
                        const std::function<void(const v1::StepResult&)>& on_step) override {
    Record("RunSteps");
    {
      absl::MutexLock lock(&mu_);
      if (chunk_limit_ <= r.first_step()) chunk_limit_ = -1;  // an earlier chunk's
    }
    for (int s = r.first_step(); s < r.first_step() + r.num_steps(); ++s) {
      if (!BeginStep(s)) break;
      absl::Time end = absl::Now() + behavior_.step_time;
      while (absl::Now() < end || behavior_.hang_in_run) {
        if (cancelled_) return absl::CancelledError("cancelled");
        absl::SleepFor(absl::Microseconds(200));
      }
      if (s == behavior_.fail_at_step) return absl::AbortedError("peer vanished");
      v1::StepResult result;
      result.set_step(s);
      result.set_rank(rank_);
      result.set_loss(3.0f - 0.01f * s);
      result.set_tokens(100);
      result.set_compute_time_s(absl::ToDoubleSeconds(behavior_.step_time) * (1 + rank_));
      result.set_peak_memory_bytes(kPeakMemoryBytes * (1 + rank_));
      // Phases that name the rank: forward_s is the rank, the rest its time.
      result.mutable_phases()->set_forward_s(rank_);
      result.mutable_phases()->set_backward_s(result.compute_time_s());
      result.mutable_phases()->set_collective_s(absl::ToDoubleSeconds(behavior_.collective_wait));
      bool evaluated = false;
      {
        absl::MutexLock lock(&mu_);
        evaluated = EvaluatesAfterStep(spec_, s);
      }
      // FP8 statistics steps: one tensor whose figures name the rank.
      if (spec_.fp8().stats_interval_steps() > 0 && s % spec_.fp8().stats_interval_steps() == 0) {
        v1::Fp8TensorStats* t = result.add_fp8_stats();
        t->set_block(0);
        t->set_linear("qkv");
        t->set_role(v1::Fp8TensorStats::INPUT);
        t->set_format("e4m3");
        t->set_amax(1.0f + rank_);
        t->set_scale(448.0f / (1.0f + rank_));
        t->set_saturated(1 + rank_);
        t->set_underflowed(10 * rank_);
        t->set_elements(1000);
      }
      if (evaluated) {
        result.mutable_validation()->set_loss(3.5f - 0.01f * s);
        result.mutable_validation()->set_tokens(40);
      }
      const int shadow_interval = spec_.fp8().shadow_interval_steps();
      if (shadow_interval > 0 && (s + 1) % shadow_interval == 0) {
        v1::ShadowLoss* shadow = result.mutable_shadow();
        shadow->set_fp8_loss(3.02f - 0.01f * s);
        shadow->set_bf16_loss(3.0f - 0.01f * s);
        shadow->set_gap(shadow->fp8_loss() - shadow->bf16_loss());
        shadow->set_tokens(50);
        shadow->set_time_s(0.001 * (1 + rank_));
      }
      on_step(result);
      if (behavior_.duplicate_results) on_step(result);
    }
    absl::MutexLock lock(&mu_);
    chunk_limit_ = -1;
    return cancelled_ ? absl::CancelledError("cancelled") : absl::OkStatus();
  }
  absl::StatusOr<int> HoldSteps(const v1::HoldStepsRequest&) override {
    Record("HoldSteps");
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    absl::MutexLock lock(&mu_);
    held_ = true;
    return steps_begun_;
  }
  absl::Status EndChunkAt(const v1::EndChunkAtRequest& r) override {
    Record("EndChunkAt@" + std::to_string(r.step()));
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    absl::MutexLock lock(&mu_);
    if (r.step() < steps_begun_) {
      return absl::FailedPreconditionError("this rank has already begun step " +
                                           std::to_string(steps_begun_ - 1));
    }
    chunk_limit_ = r.step();
    held_ = false;
    return absl::OkStatus();
  }
  // Like a real worker, it takes the snapshot (Checkpoint) and leaves its
  // manifest in dir/step-<N>/ once the "background write" is awaited (an
  // empty one: only the coordinator's commit looks at it), or fails.
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(const v1::CheckpointRequest& r) override {
    Record("Checkpoint@" + std::to_string(r.step()));
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    absl::SleepFor(behavior_.checkpoint_time);
    if (r.step() == behavior_.fail_checkpoint_at) {
      return absl::ResourceExhaustedError("no space left on device");
    }
    {
      absl::MutexLock lock(&mu_);
      checkpoint_dirs_[r.step()] = r.dir();
    }
    // Unless the write is slow, held or failing, it is done at once, as on
    // a fast disk: the manifest is there before the next steps run.
    if (behavior_.checkpoint_write_time == absl::ZeroDuration() &&
        behavior_.checkpoint_write_gate == nullptr &&
        r.step() != behavior_.fail_checkpoint_write_at) {
      RETURN_IF_ERROR(WriteManifest(r.dir(), r.step()));
    }
    v1::CheckpointResponse response;
    response.set_path(StepDir(r.dir(), r.step()) + "/" + RankManifestName(rank_));
    response.set_bytes(kCheckpointBytes);
    response.set_snapshot_s(0.001);
    response.set_background(true);
    return response;
  }
  absl::StatusOr<v1::AwaitCheckpointResponse> AwaitCheckpoint(
      const v1::AwaitCheckpointRequest& r) override {
    Record("AwaitCheckpoint@" + std::to_string(r.step()));
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    std::string root;
    {
      absl::MutexLock lock(&mu_);
      auto it = checkpoint_dirs_.find(r.step());
      if (it == checkpoint_dirs_.end()) {
        return absl::FailedPreconditionError("no checkpoint of that step was started");
      }
      root = it->second;
    }
    absl::SleepFor(behavior_.checkpoint_write_time);
    if (behavior_.checkpoint_write_gate != nullptr &&
        !behavior_.checkpoint_write_gate->WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return absl::DeadlineExceededError("the test never released the checkpoint write");
    }
    if (r.step() == behavior_.fail_checkpoint_write_at) {
      return absl::Status(behavior_.checkpoint_write_fail_code,
                          behavior_.checkpoint_write_fail_code ==
                                  absl::StatusCode::kResourceExhausted
                              ? "writing the checkpoint: No space left on device"
                              : "writing the checkpoint: Input/output error");
    }
    RETURN_IF_ERROR(WriteManifest(root, r.step()));
    v1::AwaitCheckpointResponse response;
    response.set_path(StepDir(root, r.step()) + "/" + RankManifestName(rank_));
    response.set_bytes(kCheckpointBytes);
    response.set_write_s(absl::ToDoubleSeconds(behavior_.checkpoint_write_time));
    return response;
  }
  static constexpr int64_t kCheckpointBytes = 1000;  // what each rank reports writing
  static constexpr int64_t kPeakMemoryBytes = 1 << 20;  // rank r reports r + 1 times this
  absl::Status WriteManifest(const std::string& root, int step) {
    RETURN_IF_ERROR(CreateStepDir(root, step));
    return WriteFileDurably(StepDir(root, step), RankManifestName(rank_), "");
  }
  // The resume step SetupJob asked for (-1 before SetupJob).
  int resume_step() {
    absl::MutexLock lock(&mu_);
    return resume_step_;
  }
  absl::Status Abort(const v1::AbortRequest&) override {
    Record("Abort");
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    return absl::Status(behavior_.abort_code, "fake abort answer");
  }
  absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(const v1::GetJobLogsRequest& r) override {
    if (behavior_.unreachable) return absl::UnavailableError("connection refused");
    v1::GetJobLogsResponse response;
    response.set_known(!behavior_.log_messages.empty());
    response.set_next_sequence(r.after_sequence());
    for (size_t i = static_cast<size_t>(r.after_sequence()); i < behavior_.log_messages.size(); ++i) {
      v1::LogLine* line = response.add_lines();
      line->set_sequence(static_cast<int64_t>(i) + 1);
      line->set_time_unix_ms(1000 + static_cast<int64_t>(i));
      line->set_severity(v1::INFO);
      line->set_job_id(r.job_id());
      line->set_rank(rank_);
      line->set_step(-1);
      line->set_message(behavior_.log_messages[i]);
      response.set_next_sequence(line->sequence());
    }
    return response;
  }
  void CancelInFlight() override {
    absl::MutexLock lock(&mu_);  // wakes a held RunSteps
    cancelled_ = true;
  }

  std::vector<std::string> commands() {
    absl::MutexLock lock(&mu_);
    return commands_;
  }

 private:
  void Record(const std::string& c) {
    absl::MutexLock lock(&mu_);
    commands_.push_back(c);
  }
  // Waits out a hold; false if the chunk ends before step `s` (or the call
  // was cancelled), else marks `s` begun.
  bool BeginStep(int s) {
    absl::MutexLock lock(&mu_);
    auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !held_ || cancelled_; };
    mu_.Await(absl::Condition(&released));
    if (cancelled_ || (chunk_limit_ >= 0 && s >= chunk_limit_)) return false;
    steps_begun_ = s + 1;
    return true;
  }
  int rank_;
  FakeWorkerBehavior behavior_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::vector<std::string> commands_;
  int resume_step_ = -1;
  v1::JobSpec spec_;  // from SetupJob
  std::map<int, std::string> checkpoint_dirs_;  // checkpoints started, by step
  int steps_begun_ ABSL_GUARDED_BY(mu_) = 0;  // the first step not begun
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int chunk_limit_ ABSL_GUARDED_BY(mu_) = -1;
};

// CoordinatorOptions.connect for tests: the n-th connection the
// coordinator opens (from 0; two per attempt of a 2-rank job, then one per
// rank for each log read) is a FakeWorkerConnection with `behavior(n)`.
inline std::function<std::unique_ptr<WorkerConnection>(const std::string&)> FakeWorkerConnector(
    std::function<FakeWorkerBehavior(int)> behavior) {
  auto opened = std::make_shared<std::atomic<int>>(0);
  return [behavior = std::move(behavior), opened](const std::string&) {
    return std::make_unique<FakeWorkerConnection>(0, behavior(opened->fetch_add(1)));
  };
}
// Every connection with the same behavior.
inline std::function<std::unique_ptr<WorkerConnection>(const std::string&)> FakeWorkerConnector(
    FakeWorkerBehavior behavior = {}) {
  return FakeWorkerConnector([behavior](int) { return behavior; });
}

}  // namespace tessera

#endif  // TESSERA_SERVER_FAKE_WORKER_CONNECTION_H_

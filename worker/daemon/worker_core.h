// A worker daemon's command state machine, without gRPC types.
//
//   idle --SetupJob--> set_up --InitCollective--> collective_ready
//   collective_ready --RunSteps--> running --(steps done)--> collective_ready
//   any state --Abort--> idle      (Checkpoint from set_up or collective_ready)
//
// A RunSteps can end early, at a step every rank agrees on: HoldSteps stops
// this rank from beginning another step and says which step it would begin
// next; EndChunkAt then names the step the chunk ends at (the largest of
// the ranks' answers, which no rank has begun) and lifts the hold.
//
// While SetupJob or InitCollective is in flight the phase reads
// "setting_up" / "joining_collective"; during Checkpoint, "checkpointing".
// A command out of order, or for a job other than the current one, is
// FAILED_PRECONDITION; so is any command while an Abort tears the job down.
// All Trainer calls except Abort run on one compute thread
// (compute_thread.h), trainer creation and destruction included. A trainer
// error with code INTERNAL or DATA_LOSS (e.g. a sticky CUDA fault) marks the
// worker unhealthy for good: heartbeats report it and SetupJob answers
// UNAVAILABLE.
#ifndef TESSERA_WORKER_DAEMON_WORKER_CORE_H_
#define TESSERA_WORKER_DAEMON_WORKER_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/worker.pb.h"
#include "worker/comm/rendezvous_store.h"
#include "worker/daemon/compute_thread.h"
#include "worker/daemon/failpoints.h"
#include "worker/daemon/job_log.h"
#include "worker/trainer/trainer.h"

namespace tessera {

class WorkerCore {
 public:
  // Builds the trainer (and its engine) for one job; given the job's spec,
  // already checked against the limits, so engine options can follow it.
  using TrainerFactory =
      std::function<absl::StatusOr<std::unique_ptr<Trainer>>(const v1::JobSpec& spec)>;
  explicit WorkerCore(TrainerFactory factory);
  ~WorkerCore();

  // Arms fault injection (failpoints.h): checked before each step and after
  // each checkpoint. Not owned; call before the first command. Null (the
  // default) arms nothing.
  void set_failpoints(Failpoints* failpoints) { failpoints_ = failpoints; }
  // Where the job's log lines go (job_log.h): set-up, joining, progress
  // every twentieth of the job's steps, checkpoints, evaluations, aborts,
  // failpoints and every failed command. Not owned; null logs nothing.
  void set_job_log(JobLog* log) { log_ = log; }

  // Creates the trainer (through the factory) and sets it up. UNAVAILABLE if
  // unhealthy; CANCELLED if aborted meanwhile; INVALID_ARGUMENT for a spec
  // beyond common/spec_limits.h (checked before anything is allocated);
  // RESOURCE_EXHAUSTED if setting up runs out of host memory.
  absl::StatusOr<v1::SetupJobResponse> SetupJob(const v1::SetupJobRequest& request);
  absl::Status InitCollective(const std::string& job_id, RendezvousStore* store,
                              const std::string& host, absl::Duration timeout);
  // Runs steps [first_step, first_step + num_steps), calling `on_step` after
  // each. Steps must continue from the last finished one. After the steps
  // the spec's data.validation names (worker/data/validation_batch_source.h)
  // the trainer evaluates before `on_step`, whose report then carries the
  // validation loss. Returns CANCELLED when the job is aborted mid-way, or
  // the failing step's (or evaluation's) error.
  absl::Status RunSteps(const std::string& job_id, int first_step, int num_steps,
                        const std::function<void(const StepReport&)>& on_step);
  // Holds the job before the first step this rank has not begun (returned):
  // RunSteps begins no step until EndChunkAt or Abort. FAILED_PRECONDITION
  // unless `job_id` is the current job and it has joined its collective
  // group (collective_ready or running).
  absl::StatusOr<int> HoldSteps(const std::string& job_id);
  // The RunSteps in flight, or the next one if none is, returns OK after
  // the steps before `step` without beginning `step`, and a hold ends. A
  // limit at or before a later RunSteps' first step does not apply to it.
  // FAILED_PRECONDITION (as HoldSteps, and) if this rank has already begun
  // `step`: it can no longer stop before it, and must not answer as if it
  // would. A limit at the first step not begun ends the chunk there.
  absl::Status EndChunkAt(const std::string& job_id, int step);
  // Takes the rank's state after `step` steps, which must equal the number
  // of steps finished, and starts writing it under dir (Trainer::
  // StartCheckpoint): returns once the state is off the device, while the
  // files are written in the background. Allowed from set_up and
  // collective_ready.
  absl::StatusOr<CheckpointStarted> Checkpoint(const std::string& job_id, int step,
                                               const std::string& dir);
  // Blocks until the checkpoint of `step` that Checkpoint started is
  // durable; its error if the write failed (CANCELLED if the job was
  // aborted meanwhile). Runs beside RunSteps (not on the compute thread).
  // FAILED_PRECONDITION for another job, or a step not started here.
  absl::StatusOr<CheckpointWritten> AwaitCheckpoint(const std::string& job_id, int step);
  // Idempotent. An empty job_id or the current job's id aborts; another id is
  // a no-op (that job is not here). Stops the command in flight through
  // Trainer::Abort, waits for it to return, then destroys the trainer on the
  // compute thread. Concurrent Aborts all return once the job is gone.
  absl::Status Abort(const std::string& job_id, const std::string& reason);

  // Waits until this worker holds no job (an Abort released it) or
  // `timeout` passes; true if it holds none.
  bool WaitUntilIdle(absl::Duration timeout);

  v1::WorkerStatus Status();
  // What this worker holds, as registration and heartbeats report it to the
  // coordinator (which tells it to abort a job it should no longer hold).
  v1::WorkerActivity Activity();
  bool healthy();
  std::string health_reason();
  // The current job's rank (0 when idle).
  int rank();
  std::thread::id compute_thread_id() const { return compute_.id(); }

 private:
  // kSettingUp, kJoining, kRunning and kCheckpointing mean a command is in
  // flight on the compute thread.
  enum class Phase { kIdle, kSettingUp, kSetUp, kJoining, kReady, kRunning, kCheckpointing };
  static const char* PhaseName(Phase phase);
  // FAILED_PRECONDITION unless the current job is job_id and phase is `want`.
  absl::Status Expect(const std::string& command, const std::string& job_id, Phase want)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION unless the current job is job_id and it is
  // collective_ready or running (HoldSteps, EndChunkAt).
  absl::Status ExpectJoined(const std::string& command, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NoteHealth(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the job: back to idle, ready for the next SetupJob.
  void ClearJobLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fires the failpoint armed for this rank before `step`, if any: ABORTED
  // for fail_collective; waits (until aborted) for hang and slow. `slowed`:
  // how long a slow failpoint held the step (zero otherwise).
  absl::Status FireFailpointBeforeStep(int step, absl::Duration* slowed) ABSL_LOCKS_EXCLUDED(mu_);
  // Fires corrupt_checkpoint for the checkpoint of `step` under `dir`.
  void FireFailpointAfterCheckpoint(int step, const std::string& dir) ABSL_LOCKS_EXCLUDED(mu_);

  // A line in the job's log, if there is one (step -1: none).
  void Log(v1::LogSeverity severity, const std::string& job_id, int rank, int step,
           const std::string& message);
  // An ERROR line for a failed command (WARNING if it was cancelled).
  void LogFailure(const std::string& job_id, int rank, int step, const std::string& command,
                  const absl::Status& status);

  TrainerFactory factory_;
  Failpoints* failpoints_ = nullptr;
  JobLog* log_ = nullptr;
  ComputeThread compute_;
  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kIdle;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  v1::JobSpec spec_ ABSL_GUARDED_BY(mu_);  // the job's, for the evaluation schedule
  std::unique_ptr<Trainer> trainer_;  // touched on the compute thread only
  Trainer* trainer_for_abort_ ABSL_GUARDED_BY(mu_) = nullptr;
  int rank_ ABSL_GUARDED_BY(mu_) = 0;
  int next_step_ ABSL_GUARDED_BY(mu_) = 0;
  // The first step not begun: next_step_, or one more while a step runs.
  int steps_begun_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;  // HoldSteps until EndChunkAt
  int chunk_limit_ ABSL_GUARDED_BY(mu_) = -1;  // EndChunkAt's step; -1: none
  // Counts jobs forgotten, so a waiting Abort can tell its job is gone even
  // if a new one has started since.
  int64_t jobs_cleared_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborting_ ABSL_GUARDED_BY(mu_) = false;
  // Directories of the checkpoints started, by step (the last few), and the
  // AwaitCheckpoint calls using the trainer now (Abort waits for them).
  std::map<int, std::string> checkpoint_dirs_ ABSL_GUARDED_BY(mu_);
  int awaits_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The job's log has its measured-against-estimated memory line.
  bool memory_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  std::string health_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_WORKER_CORE_H_

// Drives one scheduled job on its gang of workers: SetupJob on every rank,
// InitCollective on every rank at once (they rendezvous through the
// coordinator), then RunSteps in chunks that end at checkpoint boundaries,
// Checkpoint when configured, and finally Abort to release the workers.
//
// Checkpoints (server/checkpoint_commit.h) are asynchronous. At a
// checkpoint step every rank copies its state off the device (Checkpoint)
// and training goes on at once while the ranks write their files; a
// committer thread waits for every rank's write (AwaitCheckpoint), then
// commits the step (its COMMITTED marker) and prunes older steps to
// checkpoint.keep_last. At most one checkpoint is in flight: a rank's next
// Checkpoint waits for its previous write, and the runner joins the previous
// commit before starting the next. A failed snapshot or write fails the job
// (the restart rules apply) and its partial step directory is removed. The
// job SUCCEEDS only once its final checkpoint is committed. With
// checkpoint.resume_from the runner resolves the step to resume ("latest" is
// the newest committed one) before SetupJob, passes it to every rank, and
// runs steps from there.
//
// Per-rank step results are aggregated into one StepMetrics per step. The
// control-plane overhead of a step is the time between this step's
// aggregation and the previous one's (or the RunSteps dispatch) minus the
// slowest rank's compute time: what the coordinator adds on top of compute.
// Each rank's compute time per step (its step time less its waits on
// collectives) also goes to a StragglerDetector (straggler_detector.h),
// one per attempt; the ranks it names or clears go to on_slow_rank. On a
// statistics step the ranks' FP8 statistics add up into one record for
// on_numerics.
//
// Stop() may be called from any thread (cancel, lost worker, shutdown): the
// first call wins, every worker gets Abort and in-flight calls are cancelled,
// so Run() returns promptly instead of hanging.
//
// One runner is one attempt. A job that restarts (restart_policy.h) gets a
// new runner on its new gang, numbered by JobAttempt and told which
// committed step to resume from; its step records carry the attempt number.
// The outcome says what ended the attempt (the status code of the first
// failure, which decides whether it may restart), which workers
// acknowledged the final Abort (they hold nothing now), which refused the
// connection (gone), and the newest step it committed.
//
// Checkpoint now and suspend (CheckpointNow, Suspend; any thread): the job
// commits a checkpoint at its next step boundary, then goes on, or (suspend)
// releases its workers and ends the attempt SUSPENDED at that step. While a
// chunk runs, a thread ends it early at a step every rank can stop before:
// it asks every rank to hold (HoldSteps answers the first step the rank has
// not begun), then tells every rank to end the chunk at the largest answer
// (EndChunkAt); no rank has begun that step, so all stop there together.
// The step is at least one past the chunk's first, so an attempt always
// commits a step it ran, and a checkpoint asked for always commits after it
// was asked. A request that arrives between chunks is served at the next
// chunk's first boundary, except that a suspend asked for while a chunk's
// checkpoint is written stops at that checkpoint; one whose boundary is the
// job's last step is served by the final checkpoint, and the job SUCCEEDS.
//
// Step watchdog: while steps run, a thread waits for progress. If no step
// completes on every rank for spec.step_timeout_s (from the RunSteps
// dispatch for the first), the job is stopped FAILED, naming the step and
// the ranks that have not reported it: a rank whose compute thread is stuck
// while its heartbeats still arrive would otherwise hold the job forever.
#ifndef TESSERA_SERVER_JOB_RUNNER_H_
#define TESSERA_SERVER_JOB_RUNNER_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/straggler_detector.h"
#include "server/worker_connection.h"

namespace tessera {

struct JobRunnerCallbacks {
  std::function<void(v1::JobState state, const std::string& reason)> on_state;
  std::function<void(const v1::StepMetrics& metrics)> on_step;
  std::function<void(const v1::WorkerError& error)> on_worker_error;
  // After a checkpoint step is committed (so a restart can resume from it):
  // its step, sizes and times, per rank and in all.
  std::function<void(const v1::CheckpointCommitted& commit)> on_commit;
  // A checkpoint skipped because the disk is full; the job trains on.
  std::function<void(const v1::CheckpointSkipped& skipped)> on_checkpoint_skipped;
  // Free bytes under the checkpoint directory (checkpoint_space.h); unset:
  // FreeBytesUnder. Tests give a small disk.
  std::function<absl::StatusOr<int64_t>(const std::string& path)> checkpoint_free_bytes;
  // A rank named slow or cleared (straggler_detector.h), after the step's
  // on_step.
  std::function<void(const StragglerChange& change)> on_slow_rank;
  // A statistics step's FP8 record (fp8.stats_interval_steps), every rank's
  // parts added up (common/fp8_numerics.h), after the step's on_step.
  std::function<void(const v1::Fp8Numerics& numerics)> on_numerics;
};

struct JobOutcome {
  v1::JobState state = v1::FAILED;  // SUCCEEDED, FAILED, CANCELLED or SUSPENDED
  std::string reason;
  // What ended a FAILED attempt: the failing command's status code,
  // UNAVAILABLE for a lost worker, DEADLINE_EXCEEDED for the step watchdog.
  absl::StatusCode cause = absl::StatusCode::kOk;
  std::vector<std::string> idle_workers;         // acknowledged the final Abort
  std::vector<std::string> unreachable_workers;  // Abort found nobody listening
  int committed_step = 0;                        // newest step committed (0: none)
  int first_step = 0;                            // the step the attempt started from
};

struct JobAttempt {
  int number = 0;  // 0 for the first run, n after the n-th restart
  // < 0: resolve spec.checkpoint.resume_from; otherwise the step to resume
  // from (0: the start), already known to be committed.
  int resume_step = -1;
};

class JobRunner {
 public:
  JobRunner(std::string job_id, v1::JobSpec spec, std::vector<std::string> worker_ids,
            std::vector<std::unique_ptr<WorkerConnection>> connections,
            std::string rendezvous_address, absl::Duration collective_timeout,
            JobRunnerCallbacks callbacks, JobAttempt attempt = {},
            StragglerOptions straggler = {});

  // Runs the job to its end. Reports STARTING and RUNNING through on_state;
  // the state the attempt ended in (terminal, or SUSPENDED) is the return
  // value.
  JobOutcome Run();
  // Ends the job with `state` (FAILED or CANCELLED) and `reason`; `cause`
  // is what a FAILED one failed of (restart_policy.h). `lost_worker` names
  // a worker known to be gone (its heartbeats stopped): it gets no Abort,
  // which could only wait out its deadline on a stopped process.
  void Stop(v1::JobState state, const std::string& reason,
            absl::StatusCode cause = absl::StatusCode::kUnknown,
            const std::string& lost_worker = "");
  // A checkpoint at the next step boundary; the job goes on. Asking again
  // before it is served asks for the same one. FAILED_PRECONDITION without
  // checkpoint.dir, or once the attempt has stopped or ended.
  absl::Status CheckpointNow();
  // A checkpoint at the next step boundary, then the attempt ends SUSPENDED
  // at that step with `reason` (JobOutcome.committed_step is the step).
  // Errors as CheckpointNow.
  absl::Status Suspend(const std::string& reason);

 private:
  enum class BoundaryAction { kNone, kCheckpoint, kSuspend };  // in rising order
  absl::Status RequestBoundary(BoundaryAction action, const std::string& reason);
  // The action asked for since the last call (kNone if none).
  BoundaryAction TakeBoundaryAction();
  // True, and the request taken, if a suspend is pending: it can stop at a
  // step just committed. A pending checkpoint stays pending.
  bool TakeSuspend();
  // RunChunk's helper thread: once an action is asked for while the chunk
  // runs, ends the chunk early (HoldSteps, then EndChunkAt on every rank)
  // and lowers chunk_end_ to where it ends.
  void EndChunkWhenAsked(int first_step);

  // Runs fn(rank) for every rank concurrently. On the first error, stops the
  // job (FAILED, naming the worker: FailCommand) and returns that error;
  // with `failed_rank` it only returns the error and sets that rank, for
  // the caller to decide.
  absl::Status FanOut(const std::string& command,
                      const std::function<absl::Status(int rank)>& fn,
                      int* failed_rank = nullptr);
  void FailCommand(const std::string& command, int rank, const absl::Status& status);
  void SkipCheckpoint(int step, int64_t needed, int64_t available, const std::string& reason);
  // Stops the job FAILED: "checkpoint of step N under DIR: CODE: message".
  void FailCheckpoint(int step, const absl::Status& status);
  // The step the chunk ended at: first_step + num_steps, or earlier when a
  // checkpoint or suspend ended it early.
  absl::StatusOr<int> RunChunk(int first_step, int num_steps);
  // Checkpoint of `step` on every rank: returns once every rank has its
  // state copied off the device (their writes go on in the background), with
  // each rank's snapshot figures in `record`. False (the job stopped) on
  // failure.
  // kSkipped: the checkpoint does not fit on disk (checkpoint_space.h) and
  // is not the last; training goes on. `waited_s`: the runner's wait for the
  // previous commit, added to the wait phase.
  enum class CheckpointStart { kStarted, kSkipped, kFailed };
  CheckpointStart StartCheckpoint(int step, double waited_s, v1::CheckpointCommitted& record);
  // On its own thread, beside the next steps: waits for every rank's write
  // of record.step(), commits and prunes, and reports the commit. On failure
  // it stops the job (the restart rules apply as for any failed command),
  // except that a full disk (RESOURCE_EXHAUSTED) skips a checkpoint that is
  // not the last.
  void FinishCheckpoint(v1::CheckpointCommitted record, absl::Time started);
  // Commits record.step() once every rank wrote it (server/checkpoint_commit.h),
  // then prunes to keep_last (PruneAfterCommit) and reports both; false (the
  // job stopped) if the commit failed.
  bool Commit(v1::CheckpointCommitted record, absl::Time started);
  // Removes the steps checkpoint.keep_last no longer keeps, now that `step`
  // is committed, timing it into record.prune_s. A failure leaves them on
  // disk and says so in record.warning; the commit stands either way.
  void PruneAfterCommit(int step, v1::CheckpointCommitted& record);
  // When the job stops with a checkpoint's writes in flight: commits it if
  // every rank's manifest is there (the writes finished), else removes it.
  void SalvagePendingCheckpoint();
  // Until the chunk ends or the job stops: fails the job when no step
  // completes for step_timeout_.
  void WatchSteps();
  void OnStepResult(const v1::StepResult& result);
  // Abort on every rank; each rank's answer.
  std::vector<absl::Status> AbortAll(const std::string& reason);
  bool stopped();

  const std::string job_id_;
  const v1::JobSpec spec_;
  const std::vector<std::string> worker_ids_;
  std::vector<std::unique_ptr<WorkerConnection>> connections_;
  const std::string rendezvous_address_;
  const absl::Duration collective_timeout_;
  const absl::Duration step_timeout_;
  JobRunnerCallbacks callbacks_;
  const JobAttempt attempt_;
  const int64_t checkpoint_bytes_;  // one checkpoint's size (common/checkpoint_size.h)
  // Free bytes under the checkpoint directory: callbacks_.checkpoint_free_bytes or
  // FreeBytesUnder.
  const std::function<absl::StatusOr<int64_t>(const std::string&)> free_bytes_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int committed_step_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_commit_step_ ABSL_GUARDED_BY(mu_) = -1;  // started, not yet committed
  double last_prune_s_ ABSL_GUARDED_BY(mu_) = 0;       // the latest commit's pruning
  // The last checkpoint's wait and snapshot, shown as phases of the first
  // step after it (step -1: none pending).
  struct CheckpointPhases {
    int step = -1;
    double wait_s = 0, snapshot_s = 0;
  };
  CheckpointPhases checkpoint_phases_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> lost_workers_ ABSL_GUARDED_BY(mu_);
  JobOutcome stop_outcome_ ABSL_GUARDED_BY(mu_);
  struct Partial {
    std::vector<bool> reported;  // by rank
    std::vector<double> compute_s;  // by rank: step time less collective waits
    int ranks = 0;               // how many have
    v1::StepMetrics metrics;
    v1::Fp8Numerics numerics;  // statistics steps: the ranks' parts so far
  };
  // Steps some but not all ranks have reported, by step. At most the steps
  // of one RunSteps chunk are in flight, and a step leaves once complete, so
  // this never grows with spec.steps.
  std::map<int, Partial> partial_ ABSL_GUARDED_BY(mu_);
  // Steps complete in order (every rank streams its steps in order), so a
  // result for a step below this one is a duplicate and is dropped.
  int first_unfinished_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_step_done_ ABSL_GUARDED_BY(mu_);
  int64_t steps_done_ ABSL_GUARDED_BY(mu_) = 0;  // progress the watchdog sees
  StragglerDetector straggler_ ABSL_GUARDED_BY(mu_);
  bool chunk_running_ ABSL_GUARDED_BY(mu_) = false;
  int chunk_end_ ABSL_GUARDED_BY(mu_) = 0;  // the step the running chunk ends at
  BoundaryAction boundary_action_ ABSL_GUARDED_BY(mu_) = BoundaryAction::kNone;
  std::string suspend_reason_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // Run() is returning
};

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_RUNNER_H_

// The coordinator's core: the worker registry, the gang scheduler, the jobs
// with their state machines and event logs, rendezvous, and one JobRunner
// thread per running job. No gRPC types: every method returns absl::Status,
// so it is unit-tested without a server. Request strings are bounded
// (request_limits.h) and so is everything stored from them.
//
// A background thread ticks every 100 ms: it sweeps dead workers (failing
// their jobs), and starts every queued job whose gang is free (priorities,
// backfill with a starvation bound, see scheduler.h); a queued job that
// does not fit may preempt running jobs of lower priority, which are
// suspended at a step boundary and queued again to resume by themselves
// (coordinator_preemption.cc).
//
// When an attempt ends, its workers are released: those that acknowledged
// the Abort are free at once, those that refused the connection are dropped
// from the registry, and the rest stay out of the pool until their own
// reports say they hold nothing (worker_reconciliation.h); heartbeats and
// registrations tell a worker still holding a job it should not to abort
// it. A failed attempt with a retryable cause restarts the job while
// JobSpec.max_restarts allows (attempt_outcome.h, restart_policy.h):
// RESTARTING, queued ahead of new jobs, then a new attempt on whichever
// workers are free, resuming from the newest checkpoint the job committed.
//
// Job records, every job's event history (state changes, step records,
// worker errors, with their sequence numbers) and the next job number are
// kept in the state directory's job store (job_store.h, SQLite in WAL mode),
// written as they change, so they survive the coordinator being killed. On
// the next start, a queued job is queued again; a job that was running
// resumes through the restart path from its newest committed checkpoint
// (not counted against max_restarts), or fails with a reason if it has none;
// the workers still running it are told to abort it when they re-register.
// A SUSPENDED job stays SUSPENDED. A suspend or checkpoint asked for but not
// yet served when the coordinator stops is not kept.
// Deleting a job removes its record and events; ids are never reused.
//
// Users (job_access.h): a job records the user who submitted it as its
// owner; cancel, delete, checkpoint, suspend and resume take the requesting
// Principal and are PERMISSION_DENIED unless it is the owner or an admin.
// Every state change such a request makes carries the user's name as the
// event's actor (for a cancel or suspend that an attempt records later,
// too). The default Principal::Unchecked() is the caller of a coordinator
// that checks no tokens.
//
// Quotas (coordinator_quotas.cc, quota_ledger.h): each scheduling round
// counts the workers each user's jobs hold (a job holds its world_size
// while an attempt is in flight: STARTING, RUNNING, and while being
// cancelled or suspended until its workers are released), and a queued job
// that would take its owner over their quota waits, its reason naming the
// quota. SetQuotas replaces the quotas (the quota file reloaded on SIGHUP);
// the next round applies them, and jobs already running stay running.
//
// Checkpoint now, suspend and resume (coordinator_suspend.cc): a RUNNING job
// with a checkpoint.dir can be asked for a checkpoint at its next step
// boundary (job_runner.h), and to suspend there: its attempt then ends
// SUSPENDED, its workers are released, and it stays SUSPENDED (across
// coordinator restarts too) until ResumeJob queues it again to resume from
// the committed step through the restart path (not counted as a restart).
// A worker that is stopping (SIGTERM) says so in its heartbeat, and the job
// it runs is suspended the same way where it can be; the heartbeat's answer
// tells the worker whether to wait for its Abort.
//
// Slow ranks: each attempt's runner names a rank whose compute time per
// step stays above the median rank's (straggler_detector.h). The job record
// lists the ranks named now (Job.slow_ranks, with each worker's address),
// and each naming and clearing is a SlowRankChange job event (WARNING,
// INFO). When the attempt ends the list is emptied: a restarted or resumed
// job is judged afresh on its new gang.
#ifndef TESSERA_SERVER_COORDINATOR_H_
#define TESSERA_SERVER_COORDINATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/access_policy.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/event_log.h"
#include "server/job_runner.h"
#include "server/job_store.h"
#include "server/rendezvous_table.h"
#include "server/scheduler.h"
#include "server/straggler_detector.h"
#include "server/worker_quotas.h"
#include "server/worker_registry.h"

namespace tessera {

// The job store counter holding the next job number.
inline constexpr char kNextJobNumberCounter[] = "next_job_number";

struct CoordinatorOptions {
  std::string state_dir;              // empty: nothing persisted
  std::string rendezvous_address;     // where workers reach our Rendezvous service
  absl::Duration worker_timeout = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration collective_timeout = absl::Seconds(60);
  // A job the registered workers could run that has waited this long stops
  // later jobs of its device kind from starting before it (scheduler.h).
  absl::Duration starvation_timeout = absl::Minutes(5);
  // Canonical directory (common/data_root.h) that every checkpoint.dir must
  // lie in; empty: any. Checked at submit time (INVALID_ARGUMENT).
  std::string data_root;
  // Opens a connection to a worker's WorkerService at `address`.
  std::function<std::unique_ptr<WorkerConnection>(const std::string& address)> connect;
  // Per-user limits on workers held at once (worker_quotas.h); default:
  // none. SetQuotas replaces them while running.
  WorkerQuotas quotas;
  // The clock (tests inject one).
  std::function<absl::Time()> now = absl::Now;
  // When a running job's rank is named slow (straggler_detector.h): its
  // threshold and window (--slow_rank_threshold, --slow_rank_window_steps).
  StragglerOptions slow_ranks;
  bool start_background_thread = true;
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  // Loads persisted jobs and starts the background thread.
  absl::Status Start();
  // Cancels running jobs (their workers are aborted) and stops threads.
  void Shutdown();

  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec,
                                    const Principal& by = Principal::Unchecked());
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // One page of jobs in `states` (all if empty) owned by `owner` (anyone's
  // if empty), newest first; see job_pagination.h for page sizes and tokens.
  struct JobPage {
    std::vector<v1::Job> jobs;
    std::string next_page_token;  // empty on the last page
  };
  absl::StatusOr<JobPage> ListJobs(const std::vector<v1::JobState>& states, int page_size = 0,
                                   const std::string& page_token = "",
                                   const std::string& owner = "");
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason,
                                    const Principal& by = Principal::Unchecked());
  // A checkpoint at the RUNNING job's next step boundary; it goes on.
  // NOT_FOUND for an unknown job; FAILED_PRECONDITION without
  // checkpoint.dir or when not RUNNING. Idempotent until served.
  absl::StatusOr<v1::Job> CheckpointJob(const std::string& job_id,
                                        const Principal& by = Principal::Unchecked());
  // A checkpoint at the next step boundary, then SUSPENDED (reason recorded).
  // Errors as CheckpointJob; asking again while it is pending is OK.
  absl::StatusOr<v1::Job> SuspendJob(const std::string& job_id, const std::string& reason,
                                     const Principal& by = Principal::Unchecked());
  // Queues a SUSPENDED job again (PENDING) to resume from its committed
  // step. NOT_FOUND; FAILED_PRECONDITION for a job not SUSPENDED.
  absl::StatusOr<v1::Job> ResumeJob(const std::string& job_id,
                                    const Principal& by = Principal::Unchecked());
  // NOT_FOUND for an unknown job, FAILED_PRECONDITION for one not ended.
  absl::Status DeleteJob(const std::string& job_id,
                         const Principal& by = Principal::Unchecked());
  // Dry-run placement (coordinator_preemption.cc): validates `spec` as
  // SubmitJob does and says where it would run now, whom it would preempt,
  // or what it would wait for (placement_explanation.h), its owner's quota
  // included when `by` names a user. Creates nothing.
  absl::StatusOr<v1::PlacementExplanation> ExplainPlacement(
      const v1::JobSpec& spec, const Principal& by = Principal::Unchecked());
  absl::StatusOr<std::shared_ptr<EventLog>> JobEvents(const std::string& job_id);
  // Where a job's log lines are: for each of `ranks` (empty: every rank) of
  // the job's latest placement, a connection to the worker that holds them.
  // A rank whose worker has left the registry is skipped. NOT_FOUND for an
  // unknown job; INVALID_ARGUMENT for a rank outside [0, world_size).
  struct RankLogSource {
    int rank = 0;
    std::string worker_id;
    std::unique_ptr<WorkerConnection> connection;
  };
  absl::StatusOr<std::vector<RankLogSource>> JobLogSources(const std::string& job_id,
                                                           const std::vector<int>& ranks);

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& req);
  // Also reconciles the worker's reported activity: the response names the
  // jobs it must abort. A stopping worker's job is suspended if it can be
  // (HeartbeatResponse.suspending, or not_suspended_reason says why not).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);
  std::vector<v1::WorkerRecord> ListWorkers();
  // Workers lost since this coordinator started (heartbeat timeouts and
  // workers found unreachable).
  int64_t WorkerLosses();
  RendezvousTable& rendezvous() { return rendezvous_; }

  // One scheduling round: sweep dead workers, start the jobs that fit.
  void Tick();

  // Replaces the quotas; scheduling decisions from now on follow them, and
  // pending reasons are brought up to date at once. Running jobs are left
  // alone, even if their owner is now over quota.
  void SetQuotas(WorkerQuotas quotas);

 private:
  struct JobEntry {
    v1::Job job;
    std::shared_ptr<EventLog> events = std::make_shared<EventLog>();
    std::shared_ptr<JobRunner> runner;
    std::thread thread;
    bool thread_done = false;
    // Restarts: the step the next attempt resumes from, why the job is
    // restarting (the pending reason is appended while it waits), and a
    // cancel that raced with the end of an attempt.
    int resume_step = 0;
    int first_step = 0;  // where the first attempt started (resume_from)
    std::string restart_note;
    std::string cancel_reason;
    // The user whose cancel or suspend the running attempt will carry out;
    // named as the actor of the CANCELLED or SUSPENDED change it records.
    std::string pending_actor;
    bool resume_known = false;  // resume_step is decided (restart, reload)
    int64_t stored_step_events = 0;  // since the job store was last trimmed
    // Attempts that failed before training because a placed worker could
    // not be reached (it died before its heartbeats stopped); placed again
    // without spending the restart budget, at most kMaxPlacementRetries times.
    int placement_retries = 0;
    // When the current attempt was placed (victim choice prefers the most
    // recently started).
    absl::Time attempt_started;
    // Preemption (coordinator_preemption.cc): the job whose preemption of
    // this one is in flight (empty: none), its priority and when it was
    // decided; and whether a person or a stopping worker also asked this
    // attempt to suspend, in which case it stays SUSPENDED instead of being
    // queued again.
    std::string preempted_by;
    int preempted_by_priority = 0;
    absl::Time preemption_decided;
    bool explicit_suspend = false;
    // Shown before the scheduler's reason while a preempted job waits.
    std::string preempted_note;
  };

  // Records the change as an event; `actor` names the user who asked for it
  // (a CANCELLED or SUSPENDED change without one takes pending_actor).
  void SetStateLocked(JobEntry& entry, v1::JobState state, const std::string& reason,
                      const std::string& actor = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND, then CheckMayChangeJob: the entry `by` may `action`.
  absl::StatusOr<JobEntry*> ChangeableEntryLocked(const std::string& job_id, const Principal& by,
                                                  absl::string_view action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Passes a checkpoint (suspend: false) or suspend request to the job's
  // running attempt, after the checks CheckpointJob documents.
  absl::Status RequestBoundaryLocked(JobEntry& entry, bool suspend, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stopping worker's heartbeat: suspend the job assigned to it.
  void SuspendForStoppingWorkerLocked(const std::string& worker_id, v1::HeartbeatResponse* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The jobs holding workers, as the scheduler sees them.
  std::vector<RunningJob> RunningJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks each victim of `decision` to suspend at its next step boundary and
  // records the decision as events on both sides.
  void PreemptLocked(const PreemptionDecision& decision) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An attempt of a job being preempted ended (its state already recorded):
  // reports the preemption's cost on both sides and, if it was suspended
  // for the preemption alone, queues it again.
  void EndPreemptionLocked(JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The quotas with what each user holds now and who owns each queued job.
  QuotaLedger QuotaLedgerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobLocked(JobEntry& entry, const Placement& placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An attempt's runner returned: release its workers, then restart the job
  // or record its terminal state.
  void FinishAttemptLocked(JobEntry& entry, const JobOutcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bounds and checks a worker's reported activity.
  static absl::Status CheckActivity(const v1::WorkerActivity& activity);
  // INVALID_ARGUMENT for a job_id beyond its bound; NOT_FOUND's message.
  static absl::Status CheckJobId(const std::string& job_id);
  static absl::Status NotFound(const std::string& job_id);
  void PersistLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends to the job's event log and the job store; `with_record` stores
  // the job record in the same transaction.
  void AppendEventLocked(JobEntry& entry, v1::JobEvent event, bool closes, bool with_record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job loaded from the store that was not terminal: queue it again,
  // resume it, or fail it.
  void RecoverLocked(JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the job store in the state directory and loads it (moving records
  // of releases before it in); recovers the jobs that had not ended.
  absl::Status LoadPersisted();
  void JoinFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Job SnapshotLocked(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinatorOptions options_;
  absl::Mutex mu_;
  WorkerRegistry registry_ ABSL_GUARDED_BY(mu_);
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  WorkerQuotas quotas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_ ABSL_GUARDED_BY(mu_);
  int next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  double overhead_sum_ ABSL_GUARDED_BY(mu_) = 0;
  RendezvousTable rendezvous_;
  std::unique_ptr<JobStore> store_;  // null without a state_dir
  absl::Notification stop_;
  std::thread background_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_H_

// The coordinator's core: the worker registry, the gang scheduler, the jobs
// with their state machines and event logs, rendezvous, and one JobRunner
// thread per running job. No gRPC types: every method returns absl::Status,
// so it is unit-tested without a server. Request strings are bounded
// (request_limits.h) and so is everything stored from them.
//
// A background thread ticks every 100 ms: it sweeps dead workers (failing
// their jobs), and starts every queued job whose gang is free (backfill with
// a starvation bound, see scheduler.h). Job
// records are persisted in the state directory so that `tessera jobs`
// survives a coordinator restart; a job that was not terminal when the
// coordinator stopped is marked FAILED on the next start. Deleting a job
// removes its record; the next job number is persisted too, so ids are
// never reused.
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
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/event_log.h"
#include "server/job_runner.h"
#include "server/rendezvous_table.h"
#include "server/scheduler.h"
#include "server/worker_registry.h"

namespace tessera {

struct CoordinatorOptions {
  std::string state_dir;              // empty: nothing persisted
  std::string rendezvous_address;     // where workers reach our Rendezvous service
  absl::Duration worker_timeout = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration collective_timeout = absl::Seconds(60);
  // A job the registered workers could run that has waited this long stops
  // later jobs of its device kind from starting before it (scheduler.h).
  absl::Duration starvation_timeout = absl::Minutes(5);
  // Opens a connection to a worker's WorkerService at `address`.
  std::function<std::unique_ptr<WorkerConnection>(const std::string& address)> connect;
  // The clock (tests inject one).
  std::function<absl::Time()> now = absl::Now;
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

  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // One page of jobs in `states` (all if empty), newest first; see
  // job_pagination.h for page sizes and tokens.
  struct JobPage {
    std::vector<v1::Job> jobs;
    std::string next_page_token;  // empty on the last page
  };
  absl::StatusOr<JobPage> ListJobs(const std::vector<v1::JobState>& states, int page_size = 0,
                                   const std::string& page_token = "");
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason);
  // NOT_FOUND for an unknown job, FAILED_PRECONDITION for one not ended.
  absl::Status DeleteJob(const std::string& job_id);
  absl::StatusOr<std::shared_ptr<EventLog>> JobEvents(const std::string& job_id);

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& req);
  absl::Status Heartbeat(const v1::HeartbeatRequest& req);
  std::vector<v1::WorkerRecord> ListWorkers();
  RendezvousTable& rendezvous() { return rendezvous_; }

  // One scheduling round: sweep dead workers, start the jobs that fit.
  void Tick();

 private:
  struct JobEntry {
    v1::Job job;
    std::shared_ptr<EventLog> events = std::make_shared<EventLog>();
    std::shared_ptr<JobRunner> runner;
    std::thread thread;
    bool thread_done = false;
  };

  void SetStateLocked(JobEntry& entry, v1::JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobLocked(JobEntry& entry, const Placement& placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistNextJobNumberLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadPersisted();
  void JoinFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Job SnapshotLocked(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinatorOptions options_;
  absl::Mutex mu_;
  WorkerRegistry registry_ ABSL_GUARDED_BY(mu_);
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_ ABSL_GUARDED_BY(mu_);
  int next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  double overhead_sum_ ABSL_GUARDED_BY(mu_) = 0;
  RendezvousTable rendezvous_;
  absl::Notification stop_;
  std::thread background_;
  bool shut_down_ = false;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_H_

// The numbers behind the coordinator's /metrics, without any exporter type:
// jobs by state, workers by health, and, read incrementally from each job's
// event log, steps and tokens per job and the step times and control
// overheads of the steps finished since the last read. The exporter
// (prometheus_metrics.h) calls Sync() at every scrape, so a scrape always
// sees every step the coordinator has recorded.
//
// Each step counts once in `steps` and `tokens`: a step reported again (an
// automatic restart re-runs the steps after its checkpoint, and each is
// reported with the next attempt number) counts in `repeated_steps`
// instead, the work a failure cost. So `steps` is the job's progress, also
// for a tracker started after a coordinator restart, which reads the
// restored history. Step times count every report: each was real time.
//
// Failure and recovery: restarts per job (the job record's count), workers
// lost since the coordinator started, each live worker's heartbeat age,
// the recovery time of each automatic restart (from the RESTARTING
// transition to the first step the next attempt reports) and each
// checkpoint's write time (CheckpointCommitted events).
//
// Preemption: for each preempted job, the time from the decision to its
// workers being free and the steps it will run again (the victim's
// Preemption WORKERS_FREE event; the preemptor's copy is not counted).
// Slow ranks: each job's ranks named slow now, read from the job record.
// FP8: each job's worst saturated and underflow fractions in its newest
// statistics record, read from the job record.
// Thread-compatible: the exporter serialises calls.
#ifndef TESSERA_SERVER_METRICS_TRACKER_H_
#define TESSERA_SERVER_METRICS_TRACKER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/event_log.h"

namespace tessera {

// Where the tracker reads the coordinator's state (coordinator.h methods).
struct MetricsSource {
  std::function<absl::StatusOr<std::vector<v1::Job>>()> list_jobs;
  std::function<std::vector<v1::WorkerRecord>()> list_workers;
  std::function<absl::StatusOr<std::shared_ptr<EventLog>>(const std::string&)> job_events;
  std::function<int64_t()> worker_losses;   // optional
  std::function<absl::Time()> now = absl::Now;
  std::function<absl::StatusOr<v1::Job>(const std::string&)> get_job;  // the status page's
};

class MetricsTracker {
 public:
  explicit MetricsTracker(MetricsSource source) : source_(std::move(source)) {}

  struct JobCounters {
    int64_t steps = 0;           // distinct steps reported
    int64_t tokens = 0;          // their tokens
    int64_t repeated_steps = 0;  // reports of a step already counted
    int64_t restarts = 0;        // automatic restarts so far
    int64_t peak_memory_bytes = 0;  // the most any step record reported (its fullest rank)
    // The job's newest FP8 statistics record (Job.last_numerics): its worst
    // tensor's saturated and underflow fractions. Unset while it has none.
    bool has_fp8_numerics = false;
    double fp8_worst_saturation = 0;
    double fp8_worst_underflow = 0;
  };
  struct Snapshot {
    std::map<std::string, int64_t> jobs_by_state;  // every JobState name, zeros included
    int64_t workers_healthy = 0;
    int64_t workers_unhealthy = 0;
    std::map<std::string, JobCounters> jobs;  // cumulative, per existing job
    std::vector<double> new_step_times_s;     // since the previous Sync
    std::vector<double> new_control_overheads_s;
    std::vector<double> new_recovery_times_s;
    std::vector<double> new_checkpoint_writes_s;
    int64_t new_checkpoints_skipped = 0;  // CheckpointSkipped events since the previous Sync
    std::vector<double> new_preemption_free_times_s;  // decision to the victim's workers free
    int64_t new_preemption_steps_redone = 0;
    int64_t worker_losses = 0;
    std::map<std::string, double> heartbeat_age_s;  // per registered worker
    // The ranks named slow now (Job.slow_ranks), by (job, worker): how much
    // slower than the median rank, as a fraction.
    std::map<std::pair<std::string, std::string>, double> slow_rank_slowdown;
  };
  Snapshot Sync();

 private:
  struct Cursor {
    int64_t next = 0;
    bool closed = false;
    int64_t highest_step = -1;  // steps up to this one are counted
    int64_t restarting_since_ms = 0;  // a RESTARTING seen, no step since
    JobCounters counters;
  };
  MetricsSource source_;
  std::map<std::string, Cursor> cursors_;
};

// Lists every job through the coordinator's pages.
absl::StatusOr<std::vector<v1::Job>> ListAllJobs(
    const std::function<absl::StatusOr<std::pair<std::vector<v1::Job>, std::string>>(
        const std::string& page_token)>& page);

}  // namespace tessera

#endif  // TESSERA_SERVER_METRICS_TRACKER_H_

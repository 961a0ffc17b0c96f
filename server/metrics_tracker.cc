// Incremental metrics over the coordinator's jobs and workers (see
// metrics_tracker.h).
#include "server/metrics_tracker.h"

#include <algorithm>

#include "common/fp8_numerics.h"
#include "common/status_macros.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

MetricsTracker::Snapshot MetricsTracker::Sync() {
  Snapshot out;
  const google::protobuf::EnumDescriptor* states = v1::JobState_descriptor();
  for (int i = 0; i < states->value_count(); ++i) {
    if (states->value(i)->number() != 0) out.jobs_by_state[states->value(i)->name()] = 0;
  }
  const absl::Time now = source_.now ? source_.now() : absl::Now();
  for (const v1::WorkerRecord& w : source_.list_workers()) {
    ++(w.healthy() ? out.workers_healthy : out.workers_unhealthy);
    if (w.last_heartbeat_unix_ms() > 0) {
      out.heartbeat_age_s[w.worker_id()] = std::max(
          0.0, absl::ToDoubleSeconds(now - absl::FromUnixMillis(w.last_heartbeat_unix_ms())));
    }
  }
  if (source_.worker_losses) out.worker_losses = source_.worker_losses();
  absl::StatusOr<std::vector<v1::Job>> jobs = source_.list_jobs();
  if (!jobs.ok()) return out;
  std::map<std::string, Cursor> kept;
  for (const v1::Job& job : *jobs) {
    ++out.jobs_by_state[v1::JobState_Name(job.state())];
    Cursor cursor = cursors_[job.id()];
    if (!cursor.closed) {
      absl::StatusOr<std::shared_ptr<EventLog>> log = source_.job_events(job.id());
      while (log.ok()) {
        EventLog::Batch batch = (*log)->Read(cursor.next, 0, absl::ZeroDuration());
        for (const v1::JobEvent& event : batch.events) {
          if (event.has_state_change() && event.state_change().state() == v1::RESTARTING) {
            if (cursor.restarting_since_ms == 0) cursor.restarting_since_ms = event.time_unix_ms();
            continue;
          }
          if (event.has_checkpoint()) {
            out.new_checkpoint_writes_s.push_back(event.checkpoint().write_s());
            continue;
          }
          if (event.has_checkpoint_skipped()) {
            ++out.new_checkpoints_skipped;
            continue;
          }
          if (event.has_preemption()) {
            const v1::Preemption& p = event.preemption();
            if (p.stage() == v1::Preemption::WORKERS_FREE && p.preemptor_job_id() != job.id()) {
              out.new_preemption_free_times_s.push_back(p.seconds_to_free());
              out.new_preemption_steps_redone += p.steps_redone();
            }
            continue;
          }
          if (!event.has_step()) continue;
          if (cursor.restarting_since_ms > 0) {
            out.new_recovery_times_s.push_back(
                std::max<int64_t>(0, event.time_unix_ms() - cursor.restarting_since_ms) / 1000.0);
            cursor.restarting_since_ms = 0;
          }
          if (event.step().step() > cursor.highest_step) {
            cursor.highest_step = event.step().step();
            ++cursor.counters.steps;
            cursor.counters.tokens += event.step().tokens();
          } else {
            ++cursor.counters.repeated_steps;
          }
          cursor.counters.peak_memory_bytes =
              std::max(cursor.counters.peak_memory_bytes, event.step().peak_memory_bytes());
          out.new_step_times_s.push_back(event.step().step_time_s());
          out.new_control_overheads_s.push_back(event.step().control_overhead_s());
        }
        cursor.next = batch.next_cursor;
        cursor.closed = batch.closed;
        if (batch.events.empty() || batch.closed) break;
      }
    }
    for (const v1::SlowRank& slow : job.slow_ranks()) {
      out.slow_rank_slowdown[{job.id(), slow.worker_id()}] = slow.slowdown();
    }
    cursor.counters.restarts = job.restarts();
    cursor.counters.has_fp8_numerics = job.has_last_numerics();
    cursor.counters.fp8_worst_saturation = WorstSaturation(job.last_numerics());
    cursor.counters.fp8_worst_underflow = WorstUnderflow(job.last_numerics());
    out.jobs[job.id()] = cursor.counters;
    kept[job.id()] = cursor;
  }
  cursors_ = std::move(kept);  // deleted jobs are forgotten
  return out;
}

absl::StatusOr<std::vector<v1::Job>> ListAllJobs(
    const std::function<absl::StatusOr<std::pair<std::vector<v1::Job>, std::string>>(
        const std::string& page_token)>& page) {
  std::vector<v1::Job> all;
  std::string token;
  do {
    ASSIGN_OR_RETURN(const auto p, page(token));
    if (!p.second.empty() && (p.first.empty() || p.second == token)) break;  // no progress
    all.insert(all.end(), p.first.begin(), p.first.end());
    token = p.second;
  } while (!token.empty());
  return all;
}

}  // namespace tessera

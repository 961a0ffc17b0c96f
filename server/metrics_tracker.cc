// Incremental metrics over the coordinator's jobs and workers (see
// metrics_tracker.h).
#include "server/metrics_tracker.h"

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

MetricsTracker::Snapshot MetricsTracker::Sync() {
  Snapshot out;
  const google::protobuf::EnumDescriptor* states = v1::JobState_descriptor();
  for (int i = 0; i < states->value_count(); ++i) {
    if (states->value(i)->number() != 0) out.jobs_by_state[states->value(i)->name()] = 0;
  }
  for (const v1::WorkerRecord& w : source_.list_workers()) {
    ++(w.healthy() ? out.workers_healthy : out.workers_unhealthy);
  }
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
          if (!event.has_step()) continue;
          if (event.step().step() > cursor.highest_step) {
            cursor.highest_step = event.step().step();
            ++cursor.counters.steps;
            cursor.counters.tokens += event.step().tokens();
          } else {
            ++cursor.counters.repeated_steps;
          }
          out.new_step_times_s.push_back(event.step().step_time_s());
          out.new_control_overheads_s.push_back(event.step().control_overhead_s());
        }
        cursor.next = batch.next_cursor;
        cursor.closed = batch.closed;
        if (batch.events.empty() || batch.closed) break;
      }
    }
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
    absl::StatusOr<std::pair<std::vector<v1::Job>, std::string>> p = page(token);
    if (!p.ok()) return p.status();
    if (!p->second.empty() && (p->first.empty() || p->second == token)) break;  // no progress
    all.insert(all.end(), p->first.begin(), p->first.end());
    token = p->second;
  } while (!token.empty());
  return all;
}

}  // namespace tessera

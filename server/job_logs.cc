// See job_logs.h.
#include "server/job_logs.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/job_state_machine.h"

namespace tessera {
namespace {

struct RankCursor {
  Coordinator::RankLogSource source;
  int64_t after = 0;
  bool answered = false;
  absl::Status last_error;
};

// One read of every rank's new lines (up to a page each), merged in time
// order. Returns how many lines were emitted; *gone when emit said stop.
int ReadRound(std::vector<RankCursor>& cursors, const std::string& job_id,
              const std::function<bool(const v1::LogLine&)>& emit, bool* gone) {
  std::vector<v1::LogLine> lines;
  for (RankCursor& c : cursors) {
    v1::GetJobLogsRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(c.after);
    request.set_max_lines(1000);
    absl::StatusOr<v1::GetJobLogsResponse> response = c.source.connection->GetJobLogs(request);
    if (!response.ok()) {
      c.last_error = response.status();
      continue;
    }
    c.answered = true;
    c.after = response->next_sequence();
    for (v1::LogLine& line : *response->mutable_lines()) {
      line.set_rank(c.source.rank);  // the coordinator's placement is authoritative
      line.set_worker_id(c.source.worker_id);
      lines.push_back(std::move(line));
    }
  }
  std::sort(lines.begin(), lines.end(), [](const v1::LogLine& a, const v1::LogLine& b) {
    return std::make_tuple(a.time_unix_ms(), a.rank(), a.sequence()) <
           std::make_tuple(b.time_unix_ms(), b.rank(), b.sequence());
  });
  int emitted = 0;
  for (const v1::LogLine& line : lines) {
    if (!emit(line)) {
      *gone = true;
      break;
    }
    ++emitted;
  }
  return emitted;
}

}  // namespace

absl::Status StreamJobLogs(Coordinator& core, const JobLogsRequest& request,
                           const std::function<bool(const v1::LogLine&)>& emit,
                           const std::function<bool()>& cancelled) {
  ASSIGN_OR_RETURN(std::vector<Coordinator::RankLogSource> sources,
                   core.JobLogSources(request.job_id, request.ranks));
  std::vector<RankCursor> cursors;
  for (Coordinator::RankLogSource& s : sources) cursors.push_back({std::move(s)});
  bool gone = false;
  // Everything held now: pages until a round brings nothing.
  while (ReadRound(cursors, request.job_id, emit, &gone) > 0 && !gone) {
  }
  auto none_answered = [&]() -> absl::Status {
    if (cursors.empty()) return absl::OkStatus();  // not placed yet, or every worker left
    for (const RankCursor& c : cursors) {
      if (c.answered) return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat("no worker of ", request.job_id,
                                               " could be reached for its logs: ",
                                               cursors.front().last_error.message()));
  };
  if (gone || !request.follow) return none_answered();
  while (!cancelled()) {
    absl::StatusOr<v1::Job> job = core.GetJob(request.job_id);
    const bool ended = !job.ok() || IsTerminal(job->state());  // deleted counts as ended
    const int emitted = ReadRound(cursors, request.job_id, emit, &gone);
    if (gone) return absl::OkStatus();
    if (emitted > 0) continue;
    if (ended) return none_answered();  // read after the end: nothing more will come
    absl::SleepFor(request.poll);
  }
  return absl::CancelledError("logs stream cancelled by the client");
}

}  // namespace tessera

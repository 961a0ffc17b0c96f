// `tessera logs`: a job's log lines gathered from its workers
// (WorkerService.GetJobLogs) through the coordinator, so nobody needs a
// shell on the nodes. Core logic, without gRPC types.
//
// Without `follow`: every line each selected rank's worker still holds,
// merged across ranks in time order (ties by rank, then sequence). With
// `follow`: those, then each new line as the workers write it (polled every
// `poll` when nothing arrived), until the job has ended and a last read
// found nothing more, or `cancelled` says the client left.
//
// A worker that cannot be reached is skipped, and the stream goes on with
// the others; UNAVAILABLE only when no selected rank's worker answered.
#ifndef TESSERA_SERVER_JOB_LOGS_H_
#define TESSERA_SERVER_JOB_LOGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/worker.pb.h"
#include "server/coordinator.h"

namespace tessera {

struct JobLogsRequest {
  std::string job_id;
  std::vector<int> ranks;  // empty: every rank
  bool follow = false;
  absl::Duration poll = absl::Milliseconds(500);
};

// `emit` returns false when the client is gone (the stream then ends OK).
absl::Status StreamJobLogs(Coordinator& core, const JobLogsRequest& request,
                           const std::function<bool(const v1::LogLine&)>& emit,
                           const std::function<bool()>& cancelled);

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_LOGS_H_

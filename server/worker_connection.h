// How the coordinator's core talks to one worker daemon, without gRPC types:
// the WorkerService commands as blocking calls returning absl::Status. The
// gRPC implementation is worker_client.h; tests use in-memory fakes.
#ifndef TESSERA_SERVER_WORKER_CONNECTION_H_
#define TESSERA_SERVER_WORKER_CONNECTION_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tessera/v1/worker.pb.h"

namespace tessera {

class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  virtual absl::StatusOr<v1::SetupJobResponse> SetupJob(const v1::SetupJobRequest& request) = 0;
  virtual absl::Status InitCollective(const v1::InitCollectiveRequest& request) = 0;
  // Blocks until every step finished or the stream failed; `on_step` runs
  // once per step result as it arrives (from the calling thread).
  virtual absl::Status RunSteps(const v1::RunStepsRequest& request,
                                const std::function<void(const v1::StepResult&)>& on_step) = 0;
  // Returns once the rank's state is copied off the device; the write goes
  // on in the background until AwaitCheckpoint reports it.
  virtual absl::StatusOr<v1::CheckpointResponse> Checkpoint(
      const v1::CheckpointRequest& request) = 0;
  virtual absl::StatusOr<v1::AwaitCheckpointResponse> AwaitCheckpoint(
      const v1::AwaitCheckpointRequest& request) = 0;
  // Ending a RunSteps early (worker.proto): HoldSteps answers the first step
  // the rank has not begun; EndChunkAt ends the chunk before `step`.
  virtual absl::StatusOr<int> HoldSteps(const v1::HoldStepsRequest& request) = 0;
  virtual absl::Status EndChunkAt(const v1::EndChunkAtRequest& request) = 0;
  // Best effort; idempotent on the worker.
  virtual absl::Status Abort(const v1::AbortRequest& request) = 0;
  // The worker's log lines for a job (`tessera logs`); not cancelled by
  // CancelInFlight, bounded by the request's wait plus a margin.
  virtual absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(
      const v1::GetJobLogsRequest& request) = 0;
  // Makes any call in progress on this connection return promptly (thread-safe).
  virtual void CancelInFlight() = 0;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_CONNECTION_H_

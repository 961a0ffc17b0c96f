// The WorkerService gRPC implementation: parses each command, hands it to
// WorkerCore and maps the status. RunSteps streams one StepResult per step
// as the step finishes. InitCollective gives the trainer a RendezvousClient
// to the coordinator address named in the request. Handlers may run on any
// gRPC thread; WorkerCore serialises the work.
#ifndef TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_
#define TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_

#include <string>
#include <utility>

#include "common/access_policy.h"
#include "common/grpc_security.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "worker/daemon/job_log.h"
#include "worker/daemon/worker_core.h"

namespace tessera {

// Who may command this worker and where it may write. Defaults: anyone,
// anywhere (loopback development and tests).
struct WorkerServiceSecurity {
  // Every call must hold the worker credential (the coordinator, or a peer).
  std::shared_ptr<const AccessPolicy> access;
  // Presented on the rendezvous calls to the coordinator.
  std::shared_ptr<const ClientCredentials> coordinator_credentials;
  // Canonical data root (common/data_root.h): checkpoint.dir of SetupJob and
  // the dir of Checkpoint must lie in it, else INVALID_ARGUMENT before
  // anything is written. Empty: anywhere.
  std::string data_root;
};

// GetJobLogs bounds: a call waits at most this long, and returns at most
// this many lines (1,000 when the request says 0).
inline constexpr int kMaxJobLogsWaitMs = 10'000;
inline constexpr int kMaxJobLogsLines = 10'000;

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `host` is how peers reach this worker for collectives, unless an
  // InitCollectiveRequest names one. `core` is not owned.
  // `log` (not owned; null: GetJobLogs answers that no job is known) holds
  // the jobs' log lines.
  WorkerServiceImpl(WorkerCore* core, std::string host, WorkerServiceSecurity security = {},
                    JobLog* log = nullptr)
      : core_(core), host_(std::move(host)), security_(std::move(security)), log_(log) {}

  grpc::Status SetupJob(grpc::ServerContext*, const v1::SetupJobRequest* req,
                        v1::SetupJobResponse* resp) override;
  grpc::Status InitCollective(grpc::ServerContext*, const v1::InitCollectiveRequest* req,
                              v1::InitCollectiveResponse* resp) override;
  grpc::Status RunSteps(grpc::ServerContext* context, const v1::RunStepsRequest* req,
                        grpc::ServerWriter<v1::StepResult>* writer) override;
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status AwaitCheckpoint(grpc::ServerContext*, const v1::AwaitCheckpointRequest* req,
                               v1::AwaitCheckpointResponse* resp) override;
  grpc::Status Abort(grpc::ServerContext*, const v1::AbortRequest* req,
                     v1::AbortResponse* resp) override;
  grpc::Status GetWorkerStatus(grpc::ServerContext*, const v1::GetWorkerStatusRequest* req,
                               v1::WorkerStatus* resp) override;
  grpc::Status GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest* req,
                          v1::GetJobLogsResponse* resp) override;
  grpc::Status HoldSteps(grpc::ServerContext*, const v1::HoldStepsRequest* req,
                         v1::HoldStepsResponse* resp) override;
  grpc::Status EndChunkAt(grpc::ServerContext*, const v1::EndChunkAtRequest* req,
                          v1::EndChunkAtResponse* resp) override;

 private:
  WorkerCore* core_;
  const std::string host_;
  const WorkerServiceSecurity security_;
  JobLog* const log_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_

// The WorkerService gRPC implementation: parses each command, hands it to
// WorkerCore and maps the status. RunSteps streams one StepResult per step
// as the step finishes. InitCollective gives the trainer a RendezvousClient
// to the coordinator address named in the request. Handlers may run on any
// gRPC thread; WorkerCore serialises the work.
#ifndef TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_
#define TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_

#include <string>
#include <utility>

#include "proto/tessera/v1/worker.grpc.pb.h"
#include "worker/daemon/worker_core.h"

namespace tessera {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `host` is how peers reach this worker for collectives, unless an
  // InitCollectiveRequest names one. `core` is not owned.
  WorkerServiceImpl(WorkerCore* core, std::string host) : core_(core), host_(std::move(host)) {}

  grpc::Status SetupJob(grpc::ServerContext*, const v1::SetupJobRequest* req,
                        v1::SetupJobResponse* resp) override;
  grpc::Status InitCollective(grpc::ServerContext*, const v1::InitCollectiveRequest* req,
                              v1::InitCollectiveResponse* resp) override;
  grpc::Status RunSteps(grpc::ServerContext* context, const v1::RunStepsRequest* req,
                        grpc::ServerWriter<v1::StepResult>* writer) override;
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status Abort(grpc::ServerContext*, const v1::AbortRequest* req,
                     v1::AbortResponse* resp) override;
  grpc::Status GetWorkerStatus(grpc::ServerContext*, const v1::GetWorkerStatusRequest* req,
                               v1::WorkerStatus* resp) override;

 private:
  WorkerCore* core_;
  const std::string host_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_WORKER_SERVICE_H_

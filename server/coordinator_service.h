// The coordinator's gRPC services: Coordinator (client-facing),
// WorkerRegistry and Rendezvous (worker-facing). Each method parses the
// request, calls the core (coordinator.h), maps the status and finishes.
#ifndef TESSERA_SERVER_COORDINATOR_SERVICE_H_
#define TESSERA_SERVER_COORDINATOR_SERVICE_H_

#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "server/coordinator.h"

namespace tessera {

class CallGuard;

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `guard` (not owned; null allows every call) checks credentials.
  explicit CoordinatorService(Coordinator* core, CallGuard* guard = nullptr)
      : core_(core), guard_(guard) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;

 private:
  Coordinator* core_;
  CallGuard* guard_;
};

class WorkerRegistryService final : public v1::WorkerRegistry::Service {
 public:
  // `guard` (not owned; null allows every call) checks credentials.
  explicit WorkerRegistryService(Coordinator* core, CallGuard* guard = nullptr)
      : core_(core), guard_(guard) {}
  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

 private:
  Coordinator* core_;
  CallGuard* guard_;
};

class RendezvousService final : public v1::Rendezvous::Service {
 public:
  // `guard` (not owned; null allows every call) checks credentials.
  explicit RendezvousService(Coordinator* core, CallGuard* guard = nullptr)
      : core_(core), guard_(guard) {}
  grpc::Status RendezvousSet(grpc::ServerContext*, const v1::RendezvousSetRequest* req,
                             v1::RendezvousSetResponse* resp) override;
  grpc::Status RendezvousGet(grpc::ServerContext*, const v1::RendezvousGetRequest* req,
                             v1::RendezvousGetResponse* resp) override;
  grpc::Status RendezvousAdd(grpc::ServerContext*, const v1::RendezvousAddRequest* req,
                             v1::RendezvousAddResponse* resp) override;

 private:
  Coordinator* core_;
  CallGuard* guard_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_SERVICE_H_

// The coordinator's gRPC services: Coordinator (client-facing),
// WorkerRegistry and Rendezvous (worker-facing). Each method parses the
// request, calls the core (coordinator.h), maps the status and finishes.
//
// WatchJob is the one method on gRPC's callback API (job_watch_reactor.h):
// open watch streams hold no server thread, so however many clients watch,
// the synchronous pool stays free for heartbeats, step reports and the
// other calls. At most `max_watch_streams` may be open at once; one more is
// RESOURCE_EXHAUSTED.
#ifndef TESSERA_SERVER_COORDINATOR_SERVICE_H_
#define TESSERA_SERVER_COORDINATOR_SERVICE_H_

#include <atomic>

#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "server/coordinator.h"

namespace tessera {

class CallGuard;

inline constexpr int kDefaultMaxWatchStreams = 10'000;
inline constexpr int kMaxLogStreams = 64;

class CoordinatorService final
    : public v1::Coordinator::WithCallbackMethod_WatchJob<v1::Coordinator::Service> {
 public:
  // `guard` (not owned; null allows every call) checks credentials.
  explicit CoordinatorService(Coordinator* core, CallGuard* guard = nullptr,
                              int max_watch_streams = kDefaultMaxWatchStreams)
      : core_(core), guard_(guard), max_watch_streams_(max_watch_streams) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override;
  grpc::Status CheckpointJob(grpc::ServerContext*, const v1::CheckpointJobRequest* req,
                             v1::Job* resp) override;
  grpc::Status SuspendJob(grpc::ServerContext*, const v1::SuspendJobRequest* req,
                          v1::Job* resp) override;
  grpc::Status ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status ExplainPlacement(grpc::ServerContext*, const v1::ExplainPlacementRequest* req,
                                v1::PlacementExplanation* resp) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* req) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;

  // At most kMaxLogStreams at once (each holds a server thread while it
  // follows); one more is RESOURCE_EXHAUSTED.
  grpc::Status StreamJobLogs(grpc::ServerContext* context, const v1::StreamJobLogsRequest* req,
                             grpc::ServerWriter<v1::LogLine>* writer) override;

  int open_watch_streams() const { return open_watch_streams_.load(); }

 private:
  Coordinator* core_;
  CallGuard* guard_;
  const int max_watch_streams_;
  std::atomic<int> open_watch_streams_{0};
  std::atomic<int> open_log_streams_{0};
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

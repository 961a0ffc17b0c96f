// The gRPC implementation of WorkerConnection: calls one worker daemon's
// WorkerService. Every unary call carries a deadline; RunSteps reads the
// server stream; CancelInFlight cancels whatever call is in progress.
#ifndef TESSERA_SERVER_WORKER_CLIENT_H_
#define TESSERA_SERVER_WORKER_CLIENT_H_

#include <memory>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "server/worker_connection.h"

namespace tessera {

class WorkerClient : public WorkerConnection {
 public:
  // `setup_timeout` bounds SetupJob, InitCollective, Checkpoint and
  // AwaitCheckpoint, which do real work (allocation, rendezvous, copying
  // and writing shards).
  // `credentials` (TLS client certificate and worker credential; null:
  // plaintext without a token) are presented on every call.
  WorkerClient(const std::string& address, absl::Duration setup_timeout,
               std::shared_ptr<const ClientCredentials> credentials = nullptr);

  absl::StatusOr<v1::SetupJobResponse> SetupJob(const v1::SetupJobRequest& request) override;
  absl::Status InitCollective(const v1::InitCollectiveRequest& request) override;
  absl::Status RunSteps(const v1::RunStepsRequest& request,
                        const std::function<void(const v1::StepResult&)>& on_step) override;
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(const v1::CheckpointRequest& request) override;
  absl::StatusOr<v1::AwaitCheckpointResponse> AwaitCheckpoint(
      const v1::AwaitCheckpointRequest& request) override;
  absl::StatusOr<int> HoldSteps(const v1::HoldStepsRequest& request) override;
  absl::Status EndChunkAt(const v1::EndChunkAtRequest& request) override;
  absl::Status Abort(const v1::AbortRequest& request) override;
  absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(const v1::GetJobLogsRequest& request) override;
  void CancelInFlight() override;

 private:
  // Registers a context so CancelInFlight can reach it; false if cancelled already.
  bool Track(grpc::ClientContext* context);
  void Untrack(grpc::ClientContext* context);

  std::string address_;
  absl::Duration setup_timeout_;
  std::shared_ptr<const ClientCredentials> credentials_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_CLIENT_H_

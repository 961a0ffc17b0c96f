// WorkerService calls over gRPC (see worker_client.h).
#include "server/worker_client.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_status.h"

namespace tessera {

WorkerClient::WorkerClient(const std::string& address, absl::Duration setup_timeout,
                           std::shared_ptr<const ClientCredentials> credentials)
    : address_(address),
      setup_timeout_(setup_timeout),
      credentials_(credentials != nullptr ? std::move(credentials)
                                          : std::make_shared<ClientCredentials>()),
      stub_(v1::WorkerService::NewStub(credentials_->KeepaliveChannel(address))) {}

bool WorkerClient::Track(grpc::ClientContext* context) {
  credentials_->Apply(context);
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  in_flight_.insert(context);
  return true;
}

void WorkerClient::Untrack(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(context);
}

void WorkerClient::CancelInFlight() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* c : in_flight_) c->TryCancel();
}

namespace {

// HoldSteps and EndChunkAt only set a flag on the worker.
constexpr absl::Duration kChunkEndDeadline = absl::Seconds(10);

absl::Status Annotate(const grpc::Status& status, const std::string& address) {
  absl::Status s = FromGrpcStatus(status);
  if (s.ok()) return s;
  if (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(s.code(), absl::StrCat("worker at ", address, ": ", s.message()));
  }
  return s;
}

}  // namespace

absl::StatusOr<v1::SetupJobResponse> WorkerClient::SetupJob(const v1::SetupJobRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + setup_timeout_));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::SetupJobResponse response;
  grpc::Status status = stub_->SetupJob(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(status, address_);
  return response;
}

absl::Status WorkerClient::InitCollective(const v1::InitCollectiveRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + setup_timeout_));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::InitCollectiveResponse response;
  grpc::Status status = stub_->InitCollective(&context, request, &response);
  Untrack(&context);
  return Annotate(status, address_);
}

absl::Status WorkerClient::RunSteps(const v1::RunStepsRequest& request,
                                    const std::function<void(const v1::StepResult&)>& on_step) {
  grpc::ClientContext context;  // no deadline: liveness comes from heartbeats
  if (!Track(&context)) return absl::CancelledError("job stopped");
  std::unique_ptr<grpc::ClientReader<v1::StepResult>> reader = stub_->RunSteps(&context, request);
  v1::StepResult result;
  while (reader->Read(&result)) on_step(result);
  grpc::Status status = reader->Finish();
  Untrack(&context);
  return Annotate(status, address_);
}

absl::StatusOr<v1::CheckpointResponse> WorkerClient::Checkpoint(
    const v1::CheckpointRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + setup_timeout_));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::CheckpointResponse response;
  grpc::Status status = stub_->Checkpoint(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(status, address_);
  return response;
}

absl::StatusOr<v1::AwaitCheckpointResponse> WorkerClient::AwaitCheckpoint(
    const v1::AwaitCheckpointRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + setup_timeout_));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::AwaitCheckpointResponse response;
  grpc::Status status = stub_->AwaitCheckpoint(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(status, address_);
  return response;
}

absl::StatusOr<int> WorkerClient::HoldSteps(const v1::HoldStepsRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kChunkEndDeadline));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::HoldStepsResponse response;
  grpc::Status status = stub_->HoldSteps(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(status, address_);
  return response.next_step();
}

absl::Status WorkerClient::EndChunkAt(const v1::EndChunkAtRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kChunkEndDeadline));
  if (!Track(&context)) return absl::CancelledError("job stopped");
  v1::EndChunkAtResponse response;
  grpc::Status status = stub_->EndChunkAt(&context, request, &response);
  Untrack(&context);
  return Annotate(status, address_);
}

absl::Status WorkerClient::Abort(const v1::AbortRequest& request) {
  grpc::ClientContext context;  // not tracked: Abort must go out even after a cancel
  credentials_->Apply(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::AbortResponse response;
  return Annotate(stub_->Abort(&context, request, &response), address_);
}

absl::StatusOr<v1::GetJobLogsResponse> WorkerClient::GetJobLogs(
    const v1::GetJobLogsRequest& request) {
  grpc::ClientContext context;  // not tracked: reading logs is not part of running the job
  credentials_->Apply(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(request.wait_ms()) +
                                          absl::Seconds(10)));
  v1::GetJobLogsResponse response;
  grpc::Status status = stub_->GetJobLogs(&context, request, &response);
  if (!status.ok()) return Annotate(status, address_);
  return response;
}

}  // namespace tessera

// Rendezvous RPCs as a RendezvousStore (see rendezvous_client.h).
#include "worker/daemon/rendezvous_client.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace tessera {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(30);

}  // namespace

RendezvousClient::RendezvousClient(const std::string& coordinator_address, std::string job_id)
    : job_id_(std::move(job_id)),
      stub_(v1::Rendezvous::NewStub(
          grpc::CreateChannel(coordinator_address, grpc::InsecureChannelCredentials()))) {}

absl::Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  v1::RendezvousSetRequest request;
  request.set_job_id(job_id_);
  request.set_key(key);
  request.set_value(value);
  v1::RendezvousSetResponse response;
  return FromGrpcStatus(stub_->RendezvousSet(&context, request, &response));
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::Get(const std::vector<std::string>& keys,
                                                               absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(5)));
  v1::RendezvousGetRequest request;
  request.set_job_id(job_id_);
  for (const std::string& k : keys) request.add_keys(k);
  request.set_timeout_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(timeout)));
  v1::RendezvousGetResponse response;
  grpc::Status status = stub_->RendezvousGet(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<std::string>(response.values().begin(), response.values().end());
}

absl::StatusOr<int64_t> RendezvousClient::Add(const std::string& key, int64_t increment) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  v1::RendezvousAddRequest request;
  request.set_job_id(job_id_);
  request.set_key(key);
  request.set_increment(increment);
  v1::RendezvousAddResponse response;
  grpc::Status status = stub_->RendezvousAdd(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.value();
}

}  // namespace tessera

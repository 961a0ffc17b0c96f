// Rendezvous RPCs as a RendezvousStore (see rendezvous_client.h).
#include "worker/daemon/rendezvous_client.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/time/clock.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace tessera {
namespace {

// Set and Add answer at once; the deadline only guards against a hung peer.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);
// Get's RPC deadline exceeds the wait the coordinator is asked for by this
// much, so the coordinator's own DEADLINE_EXCEEDED (naming the missing keys)
// arrives before the transport gives up.
constexpr absl::Duration kGetDeadlineMargin = absl::Seconds(5);
// timeout_ms is an int32 on the wire: about 24 days.
constexpr int64_t kMaxTimeoutMs = std::numeric_limits<int32_t>::max();

}  // namespace

RendezvousClient::RendezvousClient(const std::string& coordinator_address, std::string job_id,
                                   std::shared_ptr<const ClientCredentials> credentials)
    : job_id_(std::move(job_id)),
      credentials_(credentials != nullptr ? std::move(credentials)
                                          : std::make_shared<ClientCredentials>()),
      stub_(v1::Rendezvous::NewStub(credentials_->KeepaliveChannel(coordinator_address))) {}

absl::Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  credentials_->Apply(&context);
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
  const int64_t timeout_ms =
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, kMaxTimeoutMs);
  grpc::ClientContext context;
  credentials_->Apply(&context);
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(timeout_ms) + kGetDeadlineMargin));
  v1::RendezvousGetRequest request;
  request.set_job_id(job_id_);
  for (const std::string& k : keys) request.add_keys(k);
  request.set_timeout_ms(static_cast<int32_t>(timeout_ms));
  v1::RendezvousGetResponse response;
  grpc::Status status = stub_->RendezvousGet(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<std::string>(response.values().begin(), response.values().end());
}

absl::StatusOr<int64_t> RendezvousClient::Add(const std::string& key, int64_t increment) {
  grpc::ClientContext context;
  credentials_->Apply(&context);
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

// Status mapping between Abseil and gRPC (see grpc_status.h).
#include "common/grpc_status.h"

namespace tessera {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::string StatusCodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

}  // namespace tessera

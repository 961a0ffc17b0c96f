// The one place absl::Status and grpc::Status are mapped onto each other.
// Codes map one-to-one (both follow google.rpc.Code); the message is kept.
#ifndef TESSERA_COMMON_GRPC_STATUS_H_
#define TESSERA_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tessera {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// "INVALID_ARGUMENT", "NOT_FOUND", ... for a status code.
std::string StatusCodeName(absl::StatusCode code);

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_STATUS_H_

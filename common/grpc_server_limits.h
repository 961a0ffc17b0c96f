// What one peer can make a Tessera gRPC server hold, bounded in one place
// for both servers (the coordinator and every worker daemon): a memory
// quota for the server's transports, a limit on each call's header list,
// and a cap on concurrent calls per connection.
//
// gRPC 1.51 (Debian 12) enforces the header list limit only against peers
// that acknowledge the server's HTTP/2 SETTINGS, counts it per frame rather
// than per header block, and buffers a header field that spans CONTINUATION
// frames without any bound (CVE-2023-33953, fixed upstream in 1.53.2). These
// limits therefore bound well-behaved clients and the memory the transports
// account for; a peer without credentials is kept away from the HTTP/2
// layer altogether by requiring a client certificate at the TLS handshake
// (see grpc_security.h and README's "Running on a shared network").
#ifndef TESSERA_COMMON_GRPC_SERVER_LIMITS_H_
#define TESSERA_COMMON_GRPC_SERVER_LIMITS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server_builder.h"

namespace tessera {

struct GrpcServerLimits {
  // The server's resource quota: what its transports may hold at once.
  int64_t memory_bytes = int64_t{256} << 20;
  // One call's header list (GRPC_ARG_MAX_METADATA_SIZE). Tessera's own
  // headers (token, session, gRPC's) are well under 1 KiB.
  int max_header_list_bytes = 8 << 10;
  // Concurrent calls on one connection (GRPC_ARG_MAX_CONCURRENT_STREAMS).
  int max_concurrent_streams = 256;
};

// The limits from --grpc_memory_mib, --grpc_max_header_kib and
// --grpc_max_concurrent_streams; INVALID_ARGUMENT names a flag out of range.
absl::StatusOr<GrpcServerLimits> GrpcServerLimitsFromFlags();

// The limits as gRPC channel arguments (name, value), the quota aside.
std::vector<std::pair<std::string, int>> GrpcServerLimitArguments(const GrpcServerLimits& limits);

// Sets the quota and the arguments on `builder`.
void ApplyGrpcServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder& builder);

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_SERVER_LIMITS_H_

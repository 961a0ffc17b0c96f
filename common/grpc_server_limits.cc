// The per-server gRPC limits of grpc_server_limits.h, and their flags.
#include "common/grpc_server_limits.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/resource_quota.h"

ABSL_FLAG(int, grpc_memory_mib, 256,
          "memory quota of this server's gRPC transports, in MiB (connections, calls and their "
          "buffers; beyond it gRPC cancels calls and refuses new ones)");
ABSL_FLAG(int, grpc_max_header_kib, 8,
          "largest header list one call may carry, in KiB (token and session headers included)");
ABSL_FLAG(int, grpc_max_concurrent_streams, 256, "concurrent calls allowed on one connection");

namespace tessera {

absl::StatusOr<GrpcServerLimits> GrpcServerLimitsFromFlags() {
  GrpcServerLimits limits;
  const int memory_mib = absl::GetFlag(FLAGS_grpc_memory_mib);
  const int header_kib = absl::GetFlag(FLAGS_grpc_max_header_kib);
  const int streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  // Below 16 MiB gRPC's own buffers for a handful of calls no longer fit.
  if (memory_mib < 16 || memory_mib > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_memory_mib: ", memory_mib, " is not in [16, 1048576]"));
  }
  // gRPC's own headers take about 200 bytes; HTTP/2 caps the setting at 16 MiB.
  if (header_kib < 1 || header_kib > (16 << 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_max_header_kib: ", header_kib, " is not in [1, 16384]"));
  }
  if (streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_max_concurrent_streams: ", streams, " is not >= 1"));
  }
  limits.memory_bytes = int64_t{memory_mib} << 20;
  limits.max_header_list_bytes = header_kib << 10;
  limits.max_concurrent_streams = streams;
  return limits;
}

std::vector<std::pair<std::string, int>> GrpcServerLimitArguments(const GrpcServerLimits& limits) {
  return {
      {GRPC_ARG_MAX_METADATA_SIZE, limits.max_header_list_bytes},
      {GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams},
  };
}

void ApplyGrpcServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder& builder) {
  grpc::ResourceQuota quota("tessera-server");
  quota.Resize(static_cast<size_t>(limits.memory_bytes));
  builder.SetResourceQuota(quota);  // the builder keeps its own reference
  for (const auto& [name, value] : GrpcServerLimitArguments(limits)) {
    builder.AddChannelArgument(name, value);
  }
}

}  // namespace tessera

// The keepalive policy shared by Tessera's servers and clients (see
// grpc_keepalive.h).
#include "common/grpc_keepalive.h"

#include <algorithm>

#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace tessera {
namespace {

int Ms(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

}  // namespace

std::vector<std::pair<std::string, int>> ServerKeepaliveArguments() {
  return {
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, Ms(kMinKeepalivePing)},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_KEEPALIVE_TIME_MS, Ms(kServerKeepalivePing)},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(kServerKeepaliveTimeout)},
  };
}

void ApplyServerKeepalive(grpc::ServerBuilder& builder) {
  for (const auto& [name, value] : ServerKeepaliveArguments()) {
    builder.AddChannelArgument(name, value);
  }
}

void ApplyClientKeepalive(grpc::ChannelArguments& args, absl::Duration ping,
                          absl::Duration timeout) {
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(std::max(ping, kMinKeepalivePing)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

std::shared_ptr<grpc::Channel> KeepaliveChannel(const std::string& address) {
  grpc::ChannelArguments args;
  ApplyClientKeepalive(args);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace tessera

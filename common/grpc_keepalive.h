// One HTTP/2 keepalive policy for every Tessera connection. Clients (the CLI
// and client library watching a job for hours, workers streaming steps)
// ping a silent connection every 20 s to notice a peer that vanished without
// closing it. A gRPC server by default accepts such pings only every 5
// minutes and sends GOAWAY (too_many_pings) after two early ones, which
// would cut long watches; Tessera's servers therefore accept pings as often
// as every 10 s, also while no call is open, and ping idle clients
// themselves every minute.
#ifndef TESSERA_COMMON_GRPC_KEEPALIVE_H_
#define TESSERA_COMMON_GRPC_KEEPALIVE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace tessera {

// The shortest ping interval servers accept; clients never ping faster.
inline constexpr absl::Duration kMinKeepalivePing = absl::Seconds(10);
inline constexpr absl::Duration kClientKeepalivePing = absl::Seconds(20);
inline constexpr absl::Duration kClientKeepaliveTimeout = absl::Seconds(10);
inline constexpr absl::Duration kServerKeepalivePing = absl::Minutes(1);
inline constexpr absl::Duration kServerKeepaliveTimeout = absl::Seconds(20);

// The server side as gRPC channel arguments (name, value).
std::vector<std::pair<std::string, int>> ServerKeepaliveArguments();
void ApplyServerKeepalive(grpc::ServerBuilder& builder);

// A client channel pinging every `ping` (raised to kMinKeepalivePing if
// shorter, so a server cannot refuse it) and waiting `timeout` for the ack.
void ApplyClientKeepalive(grpc::ChannelArguments& args, absl::Duration ping = kClientKeepalivePing,
                          absl::Duration timeout = kClientKeepaliveTimeout);

// An insecure channel to `address` with the client keepalive policy.
std::shared_ptr<grpc::Channel> KeepaliveChannel(const std::string& address);

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_KEEPALIVE_H_

// The keepalive policy: servers must accept every ping a Tessera client
// sends (else long watches end in GOAWAY too_many_pings), also with no call
// open, and a client asked to ping faster than servers accept is slowed to
// the accepted rate.
#include "common/grpc_keepalive.h"

#include <map>

#include "grpc/grpc.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::map<std::string, int> ServerArgs() {
  std::map<std::string, int> m;
  for (const auto& [name, value] : ServerKeepaliveArguments()) m[name] = value;
  return m;
}

int ClientArg(const grpc::ChannelArguments& args, const char* name) {
  grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (std::string(c.args[i].key) == name) return c.args[i].value.integer;
  }
  return -1;
}

TEST(GrpcKeepalive, ServersAcceptEveryPingClientsSend) {
  std::map<std::string, int> server = ServerArgs();
  grpc::ChannelArguments client;
  ApplyClientKeepalive(client);
  ASSERT_TRUE(server.count(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS));
  EXPECT_LE(server[GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS],
            ClientArg(client, GRPC_ARG_KEEPALIVE_TIME_MS));
  EXPECT_EQ(server[GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS], 1);
  EXPECT_EQ(ClientArg(client, GRPC_ARG_KEEPALIVE_TIME_MS), 20000);
  EXPECT_EQ(ClientArg(client, GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 10000);
  // Servers also find idle clients that vanished.
  EXPECT_GT(server[GRPC_ARG_KEEPALIVE_TIME_MS], 0);
}

TEST(GrpcKeepalive, ClientsNeverPingFasterThanServersAccept) {
  grpc::ChannelArguments client;
  ApplyClientKeepalive(client, absl::Seconds(1), absl::Seconds(1));
  EXPECT_EQ(ClientArg(client, GRPC_ARG_KEEPALIVE_TIME_MS),
            static_cast<int>(absl::ToInt64Milliseconds(kMinKeepalivePing)));
}

}  // namespace
}  // namespace tessera

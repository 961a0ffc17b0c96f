// The server limits reach gRPC as the channel arguments that enforce them,
// come from their flags, refuse flag values gRPC would misread, and build a
// server that still serves.
#include "common/grpc_server_limits.h"

#include <map>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "grpc/grpc.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, grpc_memory_mib);
ABSL_DECLARE_FLAG(int, grpc_max_header_kib);
ABSL_DECLARE_FLAG(int, grpc_max_concurrent_streams);

namespace tessera {
namespace {

std::map<std::string, int> Arguments(const GrpcServerLimits& limits) {
  std::map<std::string, int> m;
  for (const auto& [name, value] : GrpcServerLimitArguments(limits)) m[name] = value;
  return m;
}

TEST(GrpcServerLimits, DefaultsBoundHeadersAndStreams) {
  std::map<std::string, int> args = Arguments(GrpcServerLimits());
  EXPECT_EQ(args[GRPC_ARG_MAX_METADATA_SIZE], 8 << 10);
  EXPECT_EQ(args[GRPC_ARG_MAX_CONCURRENT_STREAMS], 256);
  EXPECT_EQ(GrpcServerLimits().memory_bytes, int64_t{256} << 20);
}

TEST(GrpcServerLimits, FlagsSetEachLimit) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_grpc_memory_mib, 64);
  absl::SetFlag(&FLAGS_grpc_max_header_kib, 4);
  absl::SetFlag(&FLAGS_grpc_max_concurrent_streams, 8);
  absl::StatusOr<GrpcServerLimits> limits = GrpcServerLimitsFromFlags();
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->memory_bytes, int64_t{64} << 20);
  std::map<std::string, int> args = Arguments(*limits);
  EXPECT_EQ(args[GRPC_ARG_MAX_METADATA_SIZE], 4096);
  EXPECT_EQ(args[GRPC_ARG_MAX_CONCURRENT_STREAMS], 8);
}

TEST(GrpcServerLimits, DefaultFlagsGiveTheDefaults) {
  absl::StatusOr<GrpcServerLimits> limits = GrpcServerLimitsFromFlags();
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->memory_bytes, GrpcServerLimits().memory_bytes);
  EXPECT_EQ(Arguments(*limits), Arguments(GrpcServerLimits()));
}

TEST(GrpcServerLimits, OutOfRangeFlagsAreNamed) {
  const struct {
    absl::Flag<int>* flag;
    int value;
    const char* name;
  } cases[] = {
      {&FLAGS_grpc_memory_mib, 0, "--grpc_memory_mib"},
      {&FLAGS_grpc_memory_mib, 15, "--grpc_memory_mib"},
      {&FLAGS_grpc_max_header_kib, 0, "--grpc_max_header_kib"},
      {&FLAGS_grpc_max_header_kib, 16385, "--grpc_max_header_kib"},
      {&FLAGS_grpc_max_concurrent_streams, 0, "--grpc_max_concurrent_streams"},
  };
  for (const auto& c : cases) {
    absl::FlagSaver saver;
    absl::SetFlag(c.flag, c.value);
    absl::StatusOr<GrpcServerLimits> limits = GrpcServerLimitsFromFlags();
    ASSERT_FALSE(limits.ok()) << c.name << "=" << c.value;
    EXPECT_EQ(limits.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(limits.status().message().find(c.name), std::string::npos) << limits.status();
  }
}

TEST(GrpcServerLimits, ServerWithLimitsStarts) {
  grpc::CallbackGenericService service;  // a server needs at least one service
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&service);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  ApplyGrpcServerLimits(GrpcServerLimits(), builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(port, 0);
  server->Shutdown();
}

}  // namespace
}  // namespace tessera

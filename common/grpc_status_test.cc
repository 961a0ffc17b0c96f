// Every canonical code survives the round trip through gRPC unchanged.
#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(GrpcStatus, RoundTripsEveryCode) {
  for (int c = 0; c <= 16; ++c) {
    absl::Status in(static_cast<absl::StatusCode>(c), c == 0 ? "" : "msg");
    grpc::Status g = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    absl::Status out = FromGrpcStatus(g);
    EXPECT_EQ(out, in);
  }
}

TEST(GrpcStatus, NamesCodes) {
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kAborted), "ABORTED");
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
}

}  // namespace
}  // namespace tessera

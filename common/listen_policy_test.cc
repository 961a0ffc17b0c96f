#include "common/listen_policy.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ListenPolicyTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:50051", "127.1.2.3:0", "localhost:1", "[::1]:5", "unix:/tmp/s"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:1", ":50051", "10.0.0.1:1", "host:1",
                        "127.example.com:1", "1.127.0.0:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(ListenPolicyTest, RefusesOpenNonLoopbackUnlessInsecure) {
  absl::Status s = CheckListenSecurity("0.0.0.0:0", false, false, "TLS and tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--insecure"), std::string::npos);
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:0", false, true, "x").ok());
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:0", true, false, "x").ok());
  EXPECT_TRUE(CheckListenSecurity("127.0.0.1:0", false, false, "x").ok());
}

}  // namespace
}  // namespace tessera

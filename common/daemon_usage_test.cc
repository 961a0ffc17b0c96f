// Which flag files count as a daemon's own.
#include "common/daemon_usage.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(DaemonUsage, OwnFlagFilesMatchWholePathsWithOrWithoutAPrefix) {
  const std::vector<std::string> own = {"server/coordinator_main.cc",
                                        "common/grpc_server_limits.cc"};
  EXPECT_TRUE(IsOwnFlagFile("server/coordinator_main.cc", own));
  EXPECT_TRUE(IsOwnFlagFile("/build/execroot/tessera/common/grpc_server_limits.cc", own));
  EXPECT_FALSE(IsOwnFlagFile("absl/flags/parse.cc", own));
  EXPECT_FALSE(IsOwnFlagFile("other_server/coordinator_main.cc", own));
  EXPECT_FALSE(IsOwnFlagFile("server/coordinator_main.cc.orig", own));
}

}  // namespace
}  // namespace tessera

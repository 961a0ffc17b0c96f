// The collective network flags: --nccl_env parsing (good and bad entries,
// each bad one named), the loopback interface's address, an unknown
// interface, and the environment they produce.
#include "worker/daemon/collective_network.h"

#include <stdlib.h>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CollectiveNetwork, ParsesNcclSettings) {
  auto none = ParseNcclEnv("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto two = ParseNcclEnv("NCCL_IB_HCA=mlx5_0:1,NCCL_DEBUG=WARN");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].first, "NCCL_IB_HCA");
  EXPECT_EQ((*two)[0].second, "mlx5_0:1");
  EXPECT_EQ((*two)[1].second, "WARN");
}

TEST(CollectiveNetwork, RefusesBadEntriesNamingThem) {
  for (const char* bad : {"NCCL_DEBUG", "PATH=/tmp", "NCCL_=1", "NCCL_DEBUG=", "nccl_debug=INFO",
                          "NCCL_DEBUG=INFO,,NCCL_X=1", "NCCL DEBUG=1"}) {
    auto parsed = ParseNcclEnv(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--nccl_env"), absl::string_view::npos) << bad;
  }
}

TEST(CollectiveNetwork, LoopbackHasAnAddressAndUnknownInterfacesAreNamed) {
  auto lo = InterfaceAddress("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "127.0.0.1");
  auto missing = InterfaceAddress("no-such-if0");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-if0"), absl::string_view::npos);
  EXPECT_NE(missing.status().message().find("lo"), absl::string_view::npos);
}

TEST(CollectiveNetwork, EnvironmentTakesTheInterfaceUnlessNcclEnvSetsIt) {
  unsetenv("NCCL_SOCKET_IFNAME");
  ASSERT_TRUE(ApplyCollectiveEnvironment("lo", {{"NCCL_DEBUG", "WARN"}}).ok());
  EXPECT_STREQ(getenv("NCCL_SOCKET_IFNAME"), "lo");
  EXPECT_STREQ(getenv("NCCL_DEBUG"), "WARN");
  ASSERT_TRUE(ApplyCollectiveEnvironment("lo", {{"NCCL_SOCKET_IFNAME", "=ib0"}}).ok());
  EXPECT_STREQ(getenv("NCCL_SOCKET_IFNAME"), "=ib0");
}

}  // namespace
}  // namespace tessera

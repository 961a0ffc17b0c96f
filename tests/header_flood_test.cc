// An endless HTTP/2 header block from a peer with no credentials must not
// grow the coordinator. gRPC 1.51 buffers a header block spread over
// CONTINUATION frames without bound (CVE-2023-33953), whatever the server's
// limits, so a secure coordinator started with --require_client_cert refuses
// such a peer at the TLS handshake, before gRPC parses a byte of HTTP/2.
// A raw TLS client (tests/http2_raw_client.h) sends the flood, an oversized
// authorization header split into frames, and a valid token beside an
// oversized header; the coordinator's VmRSS is sampled throughout, and a
// client with a certificate and a token is served afterwards.
//
// Measured before the fix (secure coordinator, no client certificate
// required), on a 2-core machine: 64 MiB of complete 1 KiB fields in 16 KiB
// CONTINUATION frames took 2.6 s and raised VmRSS from 49 to 174 MiB, never
// returned; 16 MiB of one never-ending field took 22 s and raised it from 24
// to 86 MiB. Both connections stayed open to the end.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "tests/http2_raw_client.h"
#include "tests/process_harness.h"
#include "tests/test_cluster_credentials.h"

namespace tessera {
namespace {

using ::tessera::testing::BinaryPath;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::CommandResult;
using ::tessera::testing::FloodOptions;
using ::tessera::testing::FloodShape;
using ::tessera::testing::GrpcRequestFields;
using ::tessera::testing::HeaderField;
using ::tessera::testing::Http2Outcome;
using ::tessera::testing::MakeTempDir;
using ::tessera::testing::PeakResidentBytes;
using ::tessera::testing::PickFreePort;
using ::tessera::testing::RunCommand;
using ::tessera::testing::TestClusterCredentials;

// What the coordinator's VmRSS may grow by during and after a flood.
constexpr int64_t kRssGrowthBound = int64_t{16} << 20;

class HeaderFloodTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("header_flood"));
    absl::StatusOr<TestClusterCredentials> credentials =
        TestClusterCredentials::Make(*dir_ + "/certs");
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    credentials_ = new TestClusterCredentials(*std::move(credentials));
    port_ = PickFreePort();
    auto coordinator = ChildProcess::Start(
        BinaryPath("server/tessera-coordinator"),
        credentials_->CoordinatorFlags({absl::StrCat("--listen=127.0.0.1:", port_),
                                "--state_dir=" + *dir_ + "/state", "--require_client_cert"}),
        *dir_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = coordinator->release();
    ASSERT_TRUE(coordinator_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();
  }

  static void TearDownTestSuite() {
    delete coordinator_;
    coordinator_ = nullptr;
  }

  static std::string Cert(const std::string& name) { return credentials_->Path(name); }
  static std::string Address() { return absl::StrCat("127.0.0.1:", port_); }
  static std::vector<HeaderField> Request() {
    return GrpcRequestFields(Address(), "/tessera.v1.Coordinator/ListWorkers");
  }

  // ListWorkers over TLS, presenting `cert` ("" for none) and `token`.
  static grpc::Status ListWorkers(const std::string& cert, const std::string& token,
                                  const std::string& padding = "") {
    auto stub = v1::Coordinator::NewStub(credentials_->Channel(Address(), cert));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    if (!padding.empty()) context.AddMetadata("x-padding", padding);
    v1::ListWorkersResponse response;
    return stub->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  }

  // The server refused the connection: the handshake failed, or it closed
  // the connection before the client had written `budget` header bytes
  // (what a refused connection takes is the kernel's socket buffers, a few
  // MiB on loopback), and no call was answered (no token check ran).
  static void ExpectRefused(const absl::StatusOr<Http2Outcome>& outcome, int64_t budget) {
    if (!outcome.ok()) {
      EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable) << outcome.status();
      return;
    }
    EXPECT_TRUE(outcome->closed) << outcome->Describe();
    EXPECT_LT(outcome->header_bytes_sent, budget) << outcome->Describe();
    EXPECT_FALSE(outcome->grpc_status.has_value()) << outcome->Describe();
  }

  // Sends `flood` and checks the coordinator's VmRSS and that it still
  // serves a client with a certificate and a token.
  void FloodAndCheck(const FloodOptions& flood) {
    ASSERT_TRUE(coordinator_->Running()) << coordinator_->Log();
    const int64_t before = coordinator_->ResidentBytes();
    PeakResidentBytes peak(coordinator_->pid());
    absl::StatusOr<Http2Outcome> outcome = testing::SendHeaderFlood(
        "127.0.0.1", port_, Request(), flood);
    absl::SleepFor(absl::Seconds(1));  // after the flood, too
    const int64_t highest = peak.Stop();
    std::printf("flood: %s; coordinator VmRSS %lld KiB before, %lld KiB at the highest\n",
                outcome.ok() ? outcome->Describe().c_str() : outcome.status().ToString().c_str(),
                static_cast<long long>(before >> 10), static_cast<long long>(highest >> 10));
    ExpectRefused(outcome, flood.max_bytes);
    EXPECT_LE(highest - before, kRssGrowthBound)
        << "VmRSS " << before << " -> " << highest << " bytes; "
        << (outcome.ok() ? outcome->Describe() : outcome.status().ToString());
    ASSERT_TRUE(coordinator_->Running()) << coordinator_->Log();
    EXPECT_TRUE(ListWorkers("node", credentials_->UserToken()).ok());
  }

  static std::string* dir_;
  static TestClusterCredentials* credentials_;
  static int port_;
  static ChildProcess* coordinator_;
};

std::string* HeaderFloodTest::dir_ = nullptr;
TestClusterCredentials* HeaderFloodTest::credentials_ = nullptr;
int HeaderFloodTest::port_ = 0;
ChildProcess* HeaderFloodTest::coordinator_ = nullptr;

TEST_F(HeaderFloodTest, EndlessHeaderListWithoutCredentialsIsRefused) {
  FloodOptions flood{FloodShape::kManyFields};
  FloodAndCheck(flood);
}

TEST_F(HeaderFloodTest, EndlessHeaderFieldWithoutCredentialsIsRefused) {
  FloodOptions flood{FloodShape::kOneEndlessField};
  FloodAndCheck(flood);
}

TEST_F(HeaderFloodTest, FloodThatAcknowledgesSettingsIsRefusedToo) {
  FloodOptions flood{FloodShape::kManyFields};
  flood.ack_settings = true;
  FloodAndCheck(flood);
}

TEST_F(HeaderFloodTest, MegabyteAuthorizationInFramesNeverReachesTheTokenCheck) {
  std::vector<HeaderField> fields = Request();
  fields.push_back({"authorization", "Bearer " + std::string(1 << 20, 'a')});
  ExpectRefused(testing::SendUnaryCall("127.0.0.1", port_, fields, "", 16384,
                                       /*ack_settings=*/false, absl::Seconds(10)),
                int64_t{2} << 20);
}

TEST_F(HeaderFloodTest, MegabytePaddingBesideAValidTokenIsRefused) {
  std::vector<HeaderField> fields = Request();
  fields.push_back({"authorization", "Bearer " + credentials_->UserToken()});
  fields.push_back({"x-padding", std::string(1 << 20, 'a')});
  ExpectRefused(testing::SendUnaryCall("127.0.0.1", port_, fields, "", 16384,
                                       /*ack_settings=*/false, absl::Seconds(10)),
                int64_t{2} << 20);
}

TEST_F(HeaderFloodTest, TheSameCallsAreAnsweredWithACertificateAndAToken) {
  const std::string token = credentials_->UserToken();
  EXPECT_EQ(ListWorkers("node", token).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(ListWorkers("node", "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // No certificate, or one from another CA: no handshake, whatever the token.
  EXPECT_EQ(ListWorkers("", token).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ListWorkers("rogue", token).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The CLI presents its certificate with --tls_cert / --tls_key.
  CommandResult cli = RunCommand(
      BinaryPath("client/tessera"),
      {"workers", "--coordinator=" + Address(), "--tls_ca=" + Cert("ca.pem"),
       "--tls_cert=" + Cert("node.pem"), "--tls_key=" + Cert("node.key"),
       "--token_file=" + Cert("user.token")},
      absl::Seconds(60));
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
}

TEST_F(HeaderFloodTest, HeaderListBeyondTheLimitIsRefusedForCertificateHolders) {
  // gRPC applies --grpc_max_header_kib (8 KiB) to clients that acknowledge
  // the server's SETTINGS, as every gRPC library does.
  const std::string token = credentials_->UserToken();
  EXPECT_EQ(ListWorkers("node", token, std::string(2 << 10, 'a')).error_code(),
            grpc::StatusCode::OK);
  const grpc::Status refused = ListWorkers("node", token, std::string(16 << 10, 'a'));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
}

}  // namespace
}  // namespace tessera

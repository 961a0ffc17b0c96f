// deploy/nginx/tessera-coordinator.conf, end to end: nginx (Debian's, as
// deploy/setup.sh installs it) in front of a secure coordinator on loopback.
// Endless header blocks and oversized headers from a peer with no
// credentials end at nginx with GOAWAY while neither nginx nor the
// coordinator grows; tokens, the worker API's certificate rule and the CLI
// work through it unchanged.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
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
using ::tessera::testing::ReadFile;
using ::tessera::testing::RunCommand;
using ::tessera::testing::TestClusterCredentials;

constexpr char kNginx[] = "/usr/sbin/nginx";
constexpr int64_t kRssGrowthBound = int64_t{16} << 20;
// HTTP/2 error codes nginx ends a connection with.
constexpr uint32_t kCompressionError = 0x9;
constexpr uint32_t kEnhanceYourCalm = 0xb;

// The process serving nginx's connections: its worker, or nginx itself
// when it runs as one process.
pid_t ServingProcess(pid_t nginx) {
  std::ifstream in(absl::StrCat("/proc/", nginx, "/task/", nginx, "/children"));
  pid_t child = -1;
  in >> child;
  return child > 0 ? child : nginx;
}

// Whether 127.0.0.1:port accepts a connection within `timeout`.
bool WaitForPort(int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (up) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

class FrontProxyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    struct stat st;
    ASSERT_EQ(stat(kNginx, &st), 0) << kNginx << " is missing: run deploy/setup.sh";
    dir_ = new std::string(MakeTempDir("front_proxy"));
    absl::StatusOr<TestClusterCredentials> credentials =
        TestClusterCredentials::Make(*dir_ + "/certs");
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    credentials_ = new TestClusterCredentials(*std::move(credentials));
    const std::string backend = absl::StrCat("127.0.0.1:", PickFreePort());
    port_ = PickFreePort();

    auto coordinator = ChildProcess::Start(
        BinaryPath("server/tessera-coordinator"),
        credentials_->CoordinatorFlags({"--listen=" + backend, "--advertise_address=" + Address(),
                                "--state_dir=" + *dir_ + "/state"}),
        *dir_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = coordinator->release();
    ASSERT_TRUE(coordinator_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();

    // The shipped server block, filled in, inside a minimal nginx.conf.
    const std::string site = absl::StrReplaceAll(
        ReadFile(BinaryPath("deploy/nginx/tessera-coordinator.conf")),
        {{"@LISTEN@", Address()},
         {"@COORDINATOR@", backend},
         {"@CERT@", Cert("node.pem")},
         {"@KEY@", Cert("node.key")},
         {"@CA@", Cert("ca.pem")},
         {"@NAME@", "localhost"}});
    for (absl::string_view line : absl::StrSplit(site, '\n')) {
      line = absl::StripLeadingAsciiWhitespace(line);
      ASSERT_TRUE(absl::StartsWith(line, "#") || !absl::StrContains(line, '@')) << line;
    }
    std::ofstream(*dir_ + "/site.conf") << site;
    const std::string d = *dir_;
    std::ofstream(*dir_ + "/nginx.conf")
        << "daemon off;\nworker_processes 1;\npid " << d << "/nginx.pid;\n"
        // As root (in a sandbox's user namespace, say) nginx would hand its
        // worker and temporary directories to "nobody", which the namespace
        // may lack: one process, as root, instead.
        << (geteuid() == 0 ? "user root;\nmaster_process off;\n" : "")
        << "error_log " << d << "/nginx-error.log info;\n"
        << "events { worker_connections 256; }\n"
        << "http {\n  access_log off;\n"
        << "  client_body_temp_path " << d << "/body;\n  proxy_temp_path " << d << "/proxy;\n"
        << "  fastcgi_temp_path " << d << "/fastcgi;\n  uwsgi_temp_path " << d << "/uwsgi;\n"
        << "  scgi_temp_path " << d << "/scgi;\n"
        << "  include " << d << "/site.conf;\n}\n";
    auto nginx = ChildProcess::Start(
        kNginx, {"-p", d, "-e", d + "/nginx-error.log", "-c", d + "/nginx.conf"},
        d + "/nginx.log");
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = nginx->release();
    ASSERT_TRUE(WaitForPort(port_, absl::Seconds(30)))
        << nginx_->Log() << ReadFile(d + "/nginx-error.log");
  }

  static void TearDownTestSuite() {
    if (nginx_ != nullptr) nginx_->Stop(absl::Seconds(5));  // SIGTERM: nginx ends its worker too
    delete nginx_;
    nginx_ = nullptr;
    delete coordinator_;
    coordinator_ = nullptr;
  }

  static std::string Cert(const std::string& name) { return credentials_->Path(name); }
  static std::string Address() { return absl::StrCat("127.0.0.1:", port_); }
  static std::vector<HeaderField> Request() {
    return GrpcRequestFields(Address(), "/tessera.v1.Coordinator/ListWorkers");
  }

  // A TLS channel to nginx presenting `cert` ("" for none).
  static std::shared_ptr<grpc::Channel> Channel(const std::string& cert) {
    return credentials_->Channel(Address(), cert);
  }

  static void Prepare(grpc::ClientContext* context, const std::string& token) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  }

  static grpc::StatusCode ListWorkers(const std::string& cert, const std::string& token) {
    auto stub = v1::Coordinator::NewStub(Channel(cert));
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::ListWorkersResponse response;
    return stub->ListWorkers(&context, v1::ListWorkersRequest(), &response).error_code();
  }

  static grpc::StatusCode Register(const std::string& cert, const std::string& token) {
    auto stub = v1::WorkerRegistry::NewStub(Channel(cert));
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::RegisterWorkerRequest request;
    request.set_address("127.0.0.1:1");
    request.mutable_device()->set_kind(v1::CPU);
    v1::RegisterWorkerResponse response;
    return stub->RegisterWorker(&context, request, &response).error_code();
  }

  // nginx ended the connection with GOAWAY before the client was done, and
  // no call was answered.
  static void ExpectEndedAtTheProxy(const absl::StatusOr<Http2Outcome>& outcome,
                                    int64_t budget) {
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->goaway) << outcome->Describe();
    EXPECT_TRUE(outcome->goaway_error == kEnhanceYourCalm ||
                outcome->goaway_error == kCompressionError)
        << outcome->Describe();
    EXPECT_TRUE(outcome->closed) << outcome->Describe();
    EXPECT_LT(outcome->header_bytes_sent, budget) << outcome->Describe();
    EXPECT_FALSE(outcome->grpc_status.has_value()) << outcome->Describe();
  }

  void FloodAndCheck(const FloodOptions& flood) {
    const pid_t worker = ServingProcess(nginx_->pid());
    const int64_t coordinator_before = coordinator_->ResidentBytes();
    const int64_t nginx_before = testing::ResidentBytes(worker);
    PeakResidentBytes coordinator_peak(coordinator_->pid());
    PeakResidentBytes nginx_peak(worker);
    absl::StatusOr<Http2Outcome> outcome =
        testing::SendHeaderFlood("127.0.0.1", port_, Request(), flood);
    absl::SleepFor(absl::Seconds(1));
    const int64_t coordinator_highest = coordinator_peak.Stop();
    const int64_t nginx_highest = nginx_peak.Stop();
    std::printf("flood: %s; VmRSS KiB: coordinator %lld -> %lld, nginx worker %lld -> %lld\n",
                outcome.ok() ? outcome->Describe().c_str() : outcome.status().ToString().c_str(),
                static_cast<long long>(coordinator_before >> 10),
                static_cast<long long>(coordinator_highest >> 10),
                static_cast<long long>(nginx_before >> 10),
                static_cast<long long>(nginx_highest >> 10));
    ExpectEndedAtTheProxy(outcome, flood.max_bytes);
    EXPECT_LE(coordinator_highest - coordinator_before, kRssGrowthBound);
    EXPECT_LE(nginx_highest - nginx_before, kRssGrowthBound);
    EXPECT_EQ(ListWorkers("", credentials_->UserToken()), grpc::StatusCode::OK);
  }

  static std::string* dir_;
  static TestClusterCredentials* credentials_;
  static int port_;
  static ChildProcess* coordinator_;
  static ChildProcess* nginx_;
};

std::string* FrontProxyTest::dir_ = nullptr;
TestClusterCredentials* FrontProxyTest::credentials_ = nullptr;
int FrontProxyTest::port_ = 0;
ChildProcess* FrontProxyTest::coordinator_ = nullptr;
ChildProcess* FrontProxyTest::nginx_ = nullptr;

TEST_F(FrontProxyTest, EndlessHeaderListEndsAtTheProxy) {
  FloodOptions flood{FloodShape::kManyFields};
  FloodAndCheck(flood);
  flood.ack_settings = true;
  FloodAndCheck(flood);
}

TEST_F(FrontProxyTest, EndlessHeaderFieldEndsAtTheProxy) {
  FloodOptions flood{FloodShape::kOneEndlessField};
  FloodAndCheck(flood);
}

TEST_F(FrontProxyTest, MegabyteAuthorizationInFramesEndsBeforeTheTokenCheck) {
  std::vector<HeaderField> fields = Request();
  fields.push_back({"authorization", "Bearer " + std::string(1 << 20, 'a')});
  absl::StatusOr<Http2Outcome> outcome = testing::SendUnaryCall(
      "127.0.0.1", port_, fields, "", 16384, /*ack_settings=*/false, absl::Seconds(10));
  ExpectEndedAtTheProxy(outcome, int64_t{2} << 20);
  EXPECT_EQ(outcome->goaway_error, kEnhanceYourCalm) << outcome->Describe();
}

TEST_F(FrontProxyTest, MegabytePaddingBesideAValidTokenEndsAtTheProxy) {
  std::vector<HeaderField> fields = Request();
  fields.push_back({"authorization", "Bearer " + credentials_->UserToken()});
  fields.push_back({"x-padding", std::string(1 << 20, 'a')});
  absl::StatusOr<Http2Outcome> outcome = testing::SendUnaryCall(
      "127.0.0.1", port_, fields, "", 16384, /*ack_settings=*/false, absl::Seconds(10));
  ExpectEndedAtTheProxy(outcome, int64_t{2} << 20);
  EXPECT_EQ(outcome->goaway_error, kEnhanceYourCalm) << outcome->Describe();
}

TEST_F(FrontProxyTest, TokensAndTheWorkerCertificateRuleHoldThroughTheProxy) {
  const std::string user = credentials_->UserToken();
  const std::string worker = credentials_->WorkerToken();
  EXPECT_EQ(ListWorkers("", user), grpc::StatusCode::OK);
  EXPECT_EQ(ListWorkers("", ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListWorkers("", worker), grpc::StatusCode::PERMISSION_DENIED);
  // The worker API needs a cluster certificate at nginx, then the worker
  // credential at the coordinator.
  EXPECT_EQ(Register("", worker), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("node", user), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("node", worker), grpc::StatusCode::OK);
  CommandResult cli = RunCommand(BinaryPath("client/tessera"),
                                 {"workers", "--coordinator=" + Address(),
                                  "--tls_ca=" + Cert("ca.pem"), "--token_file=" + Cert("user.token")},
                                 absl::Seconds(60));
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
}

}  // namespace
}  // namespace tessera

#include "common/grpc_security.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

ServerSecurityFlags Coordinator(const std::string& listen) {
  ServerSecurityFlags flags;
  flags.program = "tessera-coordinator";
  flags.listen = listen;
  flags.has_user_api = true;
  return flags;
}

TEST(GrpcSecurityTest, LoopbackWithoutCredentialsIsOpen) {
  absl::StatusOr<ServerSecurity> s = LoadServerSecurity(Coordinator("127.0.0.1:0"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->secured);
  EXPECT_FALSE(s->access->enforced());
  EXPECT_FALSE(s->outgoing->tls());
}

TEST(GrpcSecurityTest, NonLoopbackWithoutCredentialsIsRefusedUnlessInsecure) {
  ServerSecurityFlags flags = Coordinator("0.0.0.0:0");
  absl::StatusOr<ServerSecurity> refused = LoadServerSecurity(flags);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);
  flags.insecure = true;
  EXPECT_TRUE(LoadServerSecurity(flags).ok());
}

TEST(GrpcSecurityTest, TokensAloneDoNotSecureANonLoopbackListen) {
  ServerSecurityFlags flags = Coordinator("0.0.0.0:0");
  flags.user_tokens_file = Write("users", "user-token-0123456789\n");
  flags.worker_token_file = Write("worker", "worker-token-0123456789\n");
  EXPECT_EQ(LoadServerSecurity(flags).status().code(), absl::StatusCode::kFailedPrecondition);
  flags.listen = "127.0.0.1:0";
  absl::StatusOr<ServerSecurity> loopback = LoadServerSecurity(flags);
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_TRUE(loopback->access->enforced());
}

TEST(GrpcSecurityTest, AnOpenHandshakeBeyondLoopbackIsWarnedAbout) {
  ServerSecurityFlags flags = Coordinator("0.0.0.0:50051");
  flags.tls = {"node.pem", "node.key", "ca.pem"};
  const std::string warning = OpenHandshakeWarning(flags);
  EXPECT_NE(warning.find("--require_client_cert"), std::string::npos) << warning;
  EXPECT_NE(warning.find("0.0.0.0:50051"), std::string::npos) << warning;
  flags.require_client_cert = true;
  EXPECT_EQ(OpenHandshakeWarning(flags), "");
  flags.require_client_cert = false;
  flags.listen = "127.0.0.1:50052";  // behind the nginx front
  EXPECT_EQ(OpenHandshakeWarning(flags), "");
  flags.listen = "0.0.0.0:50051";
  flags.has_user_api = false;  // a worker: its handshake always needs a certificate
  EXPECT_EQ(OpenHandshakeWarning(flags), "");
  flags.has_user_api = true;
  flags.tls = {};
  flags.insecure = true;  // plaintext: refused or explicitly insecure, warned elsewhere
  EXPECT_EQ(OpenHandshakeWarning(flags), "");
}

TEST(GrpcSecurityTest, FlagMistakesNameTheFlag) {
  struct Case {
    std::function<void(ServerSecurityFlags&)> set;
    std::string flag;
  };
  const std::string pem = Write("cert.pem", "-----BEGIN CERTIFICATE-----\nx\n");
  const std::string not_pem = Write("junk.pem", "hello");
  for (const Case& c : std::vector<Case>{
           {[&](ServerSecurityFlags& f) { f.tls.cert = pem; }, "--tls_"},
           {[&](ServerSecurityFlags& f) {
              f.tls = {pem, Write("key", "-----BEGIN PRIVATE KEY-----\n"), not_pem};
            },
            "--tls_ca"},
           {[&](ServerSecurityFlags& f) { f.user_tokens_file = Write("u", "u-0123456789abcdef"); },
            "--worker_token_file"},
           {[&](ServerSecurityFlags& f) { f.require_client_cert = true; },
            "--require_client_cert"},
           {[&](ServerSecurityFlags& f) {
              f.user_tokens_file = Write("same1", "same-token-0123456789");
              f.worker_token_file = Write("same2", "same-token-0123456789");
            },
            "--user_tokens_file"},
           {[&](ServerSecurityFlags& f) {
              f.user_tokens_file = Write("u2", "user-token-0123456789");
              f.worker_token_file = Write("two", "a-token-0123456789abc\nb-token-0123456789abc\n");
            },
            "--worker_token_file"},
       }) {
    ServerSecurityFlags flags = Coordinator("127.0.0.1:0");
    c.set(flags);
    absl::StatusOr<ServerSecurity> s = LoadServerSecurity(flags);
    ASSERT_FALSE(s.ok()) << c.flag;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_NE(s.status().message().find(c.flag), std::string::npos) << s.status();
  }
}

TEST(GrpcSecurityTest, ClientCredentialsNeedCertAndKeyTogether) {
  EXPECT_TRUE(ClientCredentials::Load({}, "").ok());
  absl::StatusOr<std::shared_ptr<ClientCredentials>> half =
      ClientCredentials::Load({"/some/cert.pem", "", ""}, "");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClientCredentials::Load({"", "", "/nonexistent/ca.pem"}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

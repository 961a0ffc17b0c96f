// TestClusterCredentials (see the header).
#include "tests/test_cluster_credentials.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/process_harness.h"

namespace tessera {
namespace testing {

absl::StatusOr<TestClusterCredentials> TestClusterCredentials::Make(const std::string& dir) {
  const CommandResult made =
      RunCommand("/bin/bash", {BinaryPath("tests/make_test_certs.sh"), dir}, absl::Seconds(60));
  if (made.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("make_test_certs.sh exited ", made.exit_code, ": ", made.output));
  }
  return TestClusterCredentials(dir);
}

std::vector<std::string> TestClusterCredentials::WorkerFlags(std::vector<std::string> flags) const {
  for (const std::string& flag :
       {"--worker_token_file=" + Path("worker.token"), "--tls_cert=" + Path("node.pem"),
        "--tls_key=" + Path("node.key"), "--tls_ca=" + Path("ca.pem")}) {
    flags.push_back(flag);
  }
  return flags;
}

std::vector<std::string> TestClusterCredentials::CoordinatorFlags(
    std::vector<std::string> flags) const {
  flags.push_back("--user_tokens_file=" + Path("user.token"));
  return WorkerFlags(std::move(flags));
}

std::string TestClusterCredentials::UserToken() const {
  return ReadTrimmedFile(Path("user.token"));
}

std::string TestClusterCredentials::WorkerToken() const {
  return ReadTrimmedFile(Path("worker.token"));
}

std::shared_ptr<grpc::Channel> TestClusterCredentials::Channel(const std::string& address,
                                                               const std::string& cert) const {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(Path("ca.pem"));
  if (!cert.empty()) {
    options.pem_cert_chain = ReadFile(Path(cert + ".pem"));
    options.pem_private_key = ReadFile(Path(cert + ".key"));
  }
  return grpc::CreateChannel(address, grpc::SslCredentials(options));
}

}  // namespace testing
}  // namespace tessera

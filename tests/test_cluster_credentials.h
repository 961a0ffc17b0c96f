// The cluster credentials of the secure-mode tests: tests/make_test_certs.sh
// writes a CA, certificates signed by it (node, user, and one from another
// CA) and the user and worker tokens into one directory. This gives the
// tests one way to make them, to pass them to a daemon as flags, and to
// connect over TLS presenting one of the certificates or none.
#ifndef TESSERA_TESTS_TEST_CLUSTER_CREDENTIALS_H_
#define TESSERA_TESTS_TEST_CLUSTER_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tessera {
namespace testing {

class TestClusterCredentials {
 public:
  // Runs make_test_certs.sh (a data dependency of the test) into `dir`.
  static absl::StatusOr<TestClusterCredentials> Make(const std::string& dir);

  // The file `name` in the credentials directory ("ca.pem", "user.token").
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // `flags`, then the daemon's token files and its TLS flags (the node
  // certificate): the user and worker tokens for the coordinator, the
  // worker token for a worker.
  std::vector<std::string> CoordinatorFlags(std::vector<std::string> flags) const;
  std::vector<std::string> WorkerFlags(std::vector<std::string> flags) const;
  std::string UserToken() const;
  std::string WorkerToken() const;
  // A TLS channel to `address` that trusts the CA and presents certificate
  // `cert` ("node", "user", ...; "" for none).
  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         const std::string& cert) const;

 private:
  explicit TestClusterCredentials(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_TESTS_TEST_CLUSTER_CREDENTIALS_H_

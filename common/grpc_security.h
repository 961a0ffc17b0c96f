// gRPC's security pieces behind one adapter: TLS server and channel
// credentials built from PEM files, the per-call bearer token and worker
// session headers, and the server-side check of a call against an
// AccessPolicy. The rest of Tessera names files and tokens; only this file
// knows gRPC's credential types.
//
// One CA signs every certificate of a cluster. Servers present --tls_cert
// and verify client certificates against --tls_ca: a worker's server
// requires one on every call (only the coordinator and peers call it), the
// coordinator's server verifies one when offered (or, with
// --require_client_cert, requires one at the handshake) and the AccessPolicy
// requires it for the worker API. A server that also makes calls (the
// coordinator to workers, a worker to the coordinator) presents the same
// certificate as its client certificate, so cluster certificates carry both
// the serverAuth and clientAuth usages and name their host in subjectAltName.
#ifndef TESSERA_COMMON_GRPC_SECURITY_H_
#define TESSERA_COMMON_GRPC_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/access_policy.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"

namespace tessera {

// The --tls_cert / --tls_key / --tls_ca flags: PEM file paths, all optional.
struct TlsFlags {
  std::string cert;
  std::string key;
  std::string ca;
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// The header carrying a worker's session (issued at registration).
inline constexpr char kWorkerSessionHeader[] = "x-tessera-worker-session";

// What a client presents: TLS (or plaintext) and, per call, a bearer token
// and a worker session. Thread-safe.
class ClientCredentials {
 public:
  ClientCredentials();  // plaintext, no token
  // For a client: --tls_ca alone verifies the server; --tls_cert and
  // --tls_key add a client certificate. INVALID_ARGUMENT names the flag.
  static absl::StatusOr<std::shared_ptr<ClientCredentials>> Load(const TlsFlags& tls,
                                                                 std::string token);

  bool tls() const { return tls_; }
  // A channel to `address` with `args` (keepalive etc.) and these credentials.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         const grpc::ChannelArguments& args) const;
  // A channel with the client keepalive policy (common/grpc_keepalive.h).
  std::shared_ptr<grpc::Channel> KeepaliveChannel(const std::string& address) const;
  // Adds the token and session headers to one call.
  void Apply(grpc::ClientContext* context) const;
  void set_session(const std::string& session);

 private:
  bool tls_ = false;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::string token_;
  mutable absl::Mutex mu_;
  std::string session_ ABSL_GUARDED_BY(mu_);
};

// The flags of a server (coordinator or worker).
struct ServerSecurityFlags {
  std::string program;  // e.g. "tessera-worker", for messages
  std::string listen;
  TlsFlags tls;
  std::string user_tokens_file;   // coordinator only
  std::string worker_token_file;  // the shared worker credential
  bool has_user_api = false;      // the coordinator: user tokens go with the worker token
  bool insecure = false;
  // The coordinator: refuse the TLS handshake to a peer without a client
  // certificate signed by --tls_ca, so that only cluster certificate holders
  // reach gRPC's HTTP/2 layer at all (gRPC 1.51 buffers an endless header
  // block without bound; see grpc_server_limits.h). Needs TLS. A worker's
  // server always requires one.
  bool require_client_cert = false;
};

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  // What this server presents when it calls others (client certificate and
  // worker credential).
  std::shared_ptr<ClientCredentials> outgoing;
  std::shared_ptr<const AccessPolicy> access;
  bool secured = false;  // TLS and tokens
  // User tokens listed without a user name (common/user_tokens.h): each
  // acts as an admin; the coordinator warns about them when it starts.
  int unnamed_user_tokens = 0;
};

// Reads and checks every file; INVALID_ARGUMENT or FAILED_PRECONDITION with
// one line naming the flag (and refusing an unsecured non-loopback listen).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFlags& flags);

// For flags LoadServerSecurity accepted: a one-line warning when the
// coordinator serves TLS beyond loopback to peers without a client
// certificate, which reach gRPC's HTTP/2 layer before any token is checked
// and can flood it with an endless header block (gRPC 1.51; README,
// "Running on a shared network"); "" otherwise. A coordinator behind the
// nginx front listens on loopback and gets no warning.
std::string OpenHandshakeWarning(const ServerSecurityFlags& flags);

// Checks one call against `policy` (null: allowed), as a gRPC status.
grpc::Status Authorize(const AccessPolicy* policy, const grpc::ServerContextBase* context, Role role);

// Checks a client API call against `policy` and says who made it in `who`
// (Principal::Unchecked() when `policy` is null or checks nothing).
grpc::Status AuthenticateUser(const AccessPolicy* policy, const grpc::ServerContextBase* context,
                              Principal* who);

// A client metadata value, or empty.
std::string ClientMetadata(const grpc::ServerContextBase* context, const std::string& key);

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_SECURITY_H_

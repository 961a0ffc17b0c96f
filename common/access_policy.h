// Who may call what: the two credentials of a Tessera cluster, without any
// gRPC type.
//
// Users present a bearer token from the coordinator's user token file and
// may call the client API (Coordinator). Workers and the coordinator itself
// present the worker credential (one shared token) and may call the worker
// API: WorkerRegistry, Rendezvous, and each worker's WorkerService. Neither
// credential opens the other API, so a user cannot register a worker and a
// worker cannot submit jobs. When the servers run with TLS, worker calls
// also need a client certificate the server verified against its CA (mTLS).
//
// Each user token belongs to a named user, who is either a plain user or an
// admin (common/user_tokens.h reads them from the user token file). A
// client API call is made by the user of its token (a Principal); what that
// user may do to which job is the coordinator's rule (server/job_access.h).
//
// Missing or unknown credentials are UNAUTHENTICATED; a valid credential of
// the wrong role is PERMISSION_DENIED. Tokens are compared as SHA-256
// digests in constant time, so timing reveals nothing about them.
#ifndef TESSERA_COMMON_ACCESS_POLICY_H_
#define TESSERA_COMMON_ACCESS_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

enum class Role { kUser, kWorker };

// One user token and whom it names.
struct UserToken {
  std::string user;  // the name jobs record as their owner
  bool admin = false;  // may act on every user's jobs
  std::string token;
};

// Who made a client API call.
struct Principal {
  // The token's user; empty when calls are not checked (no tokens
  // configured), where every caller may act on every job.
  std::string user;
  bool admin = false;
  // The caller of a coordinator that checks no tokens.
  static Principal Unchecked() { return Principal{"", true}; }
};

// What a server knows about one call.
struct Caller {
  // The value of the `authorization` header: "Bearer TOKEN", or empty.
  std::string authorization;
  // The peer presented a client certificate that the server verified.
  bool verified_client_cert = false;
};

class AccessPolicy {
 public:
  // Every call allowed: no tokens configured (a loopback development setup).
  AccessPolicy() = default;
  // `user_tokens` may be empty (a worker's own server has no users);
  // `worker_token` must be set for any check to be made.
  AccessPolicy(const std::vector<UserToken>& user_tokens, const std::string& worker_token,
               bool worker_needs_client_cert);
  // Tokens without names: each is an admin named by its digest
  // (LegacyTokenUser).
  AccessPolicy(const std::vector<std::string>& user_tokens, const std::string& worker_token,
               bool worker_needs_client_cert);

  // True when calls are checked at all.
  bool enforced() const { return !worker_digest_.empty(); }

  // OK if `caller` may act as `role`.
  absl::Status Check(Role role, const Caller& caller) const;
  // Check for the client API, then who the caller is (Principal::Unchecked()
  // when calls are not checked).
  absl::StatusOr<Principal> AuthenticateUser(const Caller& caller) const;

 private:
  // The index into users_ of the caller's token, -1 for the worker credential.
  absl::StatusOr<int> Identify(Role role, const Caller& caller) const;

  std::vector<std::string> user_digests_;
  std::vector<Principal> users_;  // parallel to user_digests_
  std::string worker_digest_;
  bool worker_needs_client_cert_ = false;
};

// The header value a client sends: "Bearer TOKEN".
std::string BearerHeader(absl::string_view token);

// The user of a token listed without a name (the user token file's older
// one-token-a-line form): "token-" and the first 8 hex digits of its
// SHA-256, stable across restarts and revealing nothing usable.
std::string LegacyTokenUser(absl::string_view token);

}  // namespace tessera

#endif  // TESSERA_COMMON_ACCESS_POLICY_H_

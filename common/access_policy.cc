// Role checks for the client and worker APIs (see access_policy.h).
#include "common/access_policy.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace tessera {
namespace {

// Compares two equal-length digests without an early exit.
bool SameDigest(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

const char* ApiOf(Role role) {
  return role == Role::kUser ? "the client API (Coordinator)"
                             : "the worker API (WorkerRegistry, Rendezvous, WorkerService)";
}

}  // namespace

AccessPolicy::AccessPolicy(const std::vector<std::string>& user_tokens,
                           const std::string& worker_token, bool worker_needs_client_cert)
    : worker_needs_client_cert_(worker_needs_client_cert) {
  for (const std::string& t : user_tokens) user_digests_.push_back(Sha256Hex(t));
  if (!worker_token.empty()) worker_digest_ = Sha256Hex(worker_token);
}

absl::Status AccessPolicy::Check(Role role, const Caller& caller) const {
  if (!enforced()) return absl::OkStatus();
  absl::string_view header = absl::StripAsciiWhitespace(caller.authorization);
  if (header.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "no credentials: ", ApiOf(role), " needs an `authorization: Bearer TOKEN` header"));
  }
  if (!absl::StartsWithIgnoreCase(header, "bearer ")) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer TOKEN\"");
  }
  const std::string digest =
      Sha256Hex(absl::StripAsciiWhitespace(header.substr(std::string("bearer ").size())));
  // Every candidate is compared, so the time taken does not depend on which matched.
  bool is_worker = SameDigest(digest, worker_digest_);
  bool is_user = false;
  for (const std::string& d : user_digests_) is_user |= SameDigest(digest, d);
  if (!is_worker && !is_user) return absl::UnauthenticatedError("unknown token");
  const Role presented = is_worker ? Role::kWorker : Role::kUser;
  if (presented != role) {
    return absl::PermissionDeniedError(
        absl::StrCat(presented == Role::kUser ? "a user token" : "the worker credential",
                     " cannot call ", ApiOf(role)));
  }
  if (role == Role::kWorker && worker_needs_client_cert_ && !caller.verified_client_cert) {
    return absl::UnauthenticatedError(
        "the worker API needs a client certificate signed by the cluster CA (mTLS)");
  }
  return absl::OkStatus();
}

std::string BearerHeader(absl::string_view token) { return absl::StrCat("Bearer ", token); }

}  // namespace tessera

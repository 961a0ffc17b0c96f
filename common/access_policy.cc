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

std::vector<UserToken> Unnamed(const std::vector<std::string>& tokens) {
  std::vector<UserToken> out;
  for (const std::string& t : tokens) out.push_back(UserToken{LegacyTokenUser(t), true, t});
  return out;
}

}  // namespace

AccessPolicy::AccessPolicy(const std::vector<UserToken>& user_tokens,
                           const std::string& worker_token, bool worker_needs_client_cert)
    : worker_needs_client_cert_(worker_needs_client_cert) {
  for (const UserToken& t : user_tokens) {
    user_digests_.push_back(Sha256Hex(t.token));
    users_.push_back(Principal{t.user, t.admin});
  }
  if (!worker_token.empty()) worker_digest_ = Sha256Hex(worker_token);
}

AccessPolicy::AccessPolicy(const std::vector<std::string>& user_tokens,
                           const std::string& worker_token, bool worker_needs_client_cert)
    : AccessPolicy(Unnamed(user_tokens), worker_token, worker_needs_client_cert) {}

absl::Status AccessPolicy::Check(Role role, const Caller& caller) const {
  if (!enforced()) return absl::OkStatus();
  return Identify(role, caller).status();
}

absl::StatusOr<Principal> AccessPolicy::AuthenticateUser(const Caller& caller) const {
  if (!enforced()) return Principal::Unchecked();
  absl::StatusOr<int> index = Identify(Role::kUser, caller);
  if (!index.ok()) return index.status();
  return users_[static_cast<size_t>(*index)];
}

absl::StatusOr<int> AccessPolicy::Identify(Role role, const Caller& caller) const {
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
  int user_index = -1;
  for (size_t i = 0; i < user_digests_.size(); ++i) {
    if (SameDigest(digest, user_digests_[i])) user_index = static_cast<int>(i);
  }
  const bool is_user = user_index >= 0;
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
  return is_worker ? -1 : user_index;
}

std::string BearerHeader(absl::string_view token) { return absl::StrCat("Bearer ", token); }

std::string LegacyTokenUser(absl::string_view token) {
  return absl::StrCat("token-", Sha256Hex(token).substr(0, 8));
}

}  // namespace tessera

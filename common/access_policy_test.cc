#include "common/access_policy.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr char kUser[] = "user-token-0123456789";
constexpr char kWorker[] = "worker-token-0123456789";

Caller With(const std::string& token, bool cert = true) {
  return Caller{token.empty() ? "" : BearerHeader(token), cert};
}

TEST(AccessPolicyTest, OpenPolicyAllowsEverything) {
  AccessPolicy open;
  EXPECT_FALSE(open.enforced());
  EXPECT_TRUE(open.Check(Role::kWorker, Caller{}).ok());
  EXPECT_TRUE(open.Check(Role::kUser, Caller{}).ok());
}

TEST(AccessPolicyTest, EachCredentialOpensOnlyItsOwnApi) {
  AccessPolicy policy({kUser}, kWorker, /*worker_needs_client_cert=*/true);
  EXPECT_TRUE(policy.Check(Role::kUser, With(kUser)).ok());
  EXPECT_TRUE(policy.Check(Role::kWorker, With(kWorker)).ok());
  EXPECT_EQ(policy.Check(Role::kWorker, With(kUser)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(policy.Check(Role::kUser, With(kWorker)).code(), absl::StatusCode::kPermissionDenied);
}

TEST(AccessPolicyTest, MissingMalformedOrUnknownCredentialsAreUnauthenticated) {
  AccessPolicy policy({kUser}, kWorker, false);
  EXPECT_EQ(policy.Check(Role::kUser, Caller{}).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(policy.Check(Role::kUser, Caller{kUser, false}).code(),
            absl::StatusCode::kUnauthenticated);  // no "Bearer "
  EXPECT_EQ(policy.Check(Role::kUser, With("user-token-0123456780")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(policy.Check(Role::kWorker, With("worker-token-012345678")).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(AccessPolicyTest, WorkerCallsNeedAVerifiedClientCertificateUnderTls) {
  AccessPolicy tls({kUser}, kWorker, /*worker_needs_client_cert=*/true);
  EXPECT_EQ(tls.Check(Role::kWorker, With(kWorker, /*cert=*/false)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(tls.Check(Role::kUser, With(kUser, /*cert=*/false)).ok());
  AccessPolicy plaintext({kUser}, kWorker, /*worker_needs_client_cert=*/false);
  EXPECT_TRUE(plaintext.Check(Role::kWorker, With(kWorker, /*cert=*/false)).ok());
}

TEST(AccessPolicyTest, WorkerOnlyPolicyRefusesUserTokensAsUnknown) {
  AccessPolicy worker_server(std::vector<std::string>{}, kWorker, true);
  EXPECT_EQ(worker_server.Check(Role::kWorker, With(kUser)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(worker_server.Check(Role::kWorker, With(kWorker)).ok());
}

TEST(AccessPolicyTest, AUserTokenIdentifiesItsUserAndRole) {
  const std::string alice = "alice-token-0123456789";
  const std::string root = "root-token-0123456789";
  AccessPolicy policy(std::vector<UserToken>{{"alice", false, alice}, {"ops", true, root}},
                      kWorker, false);
  absl::StatusOr<Principal> who = policy.AuthenticateUser(With(alice));
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->user, "alice");
  EXPECT_FALSE(who->admin);
  who = policy.AuthenticateUser(With(root));
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->user, "ops");
  EXPECT_TRUE(who->admin);
  EXPECT_EQ(policy.AuthenticateUser(With(kWorker)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(policy.AuthenticateUser(Caller{}).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(AccessPolicyTest, UnnamedTokensAreAdminsNamedByDigest) {
  AccessPolicy policy({kUser}, kWorker, false);
  absl::StatusOr<Principal> who = policy.AuthenticateUser(With(kUser));
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->user, LegacyTokenUser(kUser));
  EXPECT_TRUE(who->admin);
}

TEST(AccessPolicyTest, AnOpenPolicyCallerIsTheUncheckedAdmin) {
  absl::StatusOr<Principal> who = AccessPolicy().AuthenticateUser(Caller{});
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->user, "");
  EXPECT_TRUE(who->admin);
}

}  // namespace
}  // namespace tessera

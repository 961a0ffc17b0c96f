#include "common/user_tokens.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr char kAliceToken[] = "alice-token-0123456789";
constexpr char kRootToken[] = "root-token-0123456789";

absl::StatusOr<std::vector<UserToken>> Parse(const std::string& text) {
  return ParseUserTokens("--user_tokens_file", text);
}

TEST(UserTokensTest, NamedTokensCarryTheirUserAndRole) {
  auto tokens = Parse(absl::StrCat("# team tokens\n\nalice user ", kAliceToken,
                                   "\n  ops\tadmin  ", kRootToken, "  \n"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 2u);
  EXPECT_EQ((*tokens)[0].user, "alice");
  EXPECT_FALSE((*tokens)[0].admin);
  EXPECT_EQ((*tokens)[0].token, kAliceToken);
  EXPECT_EQ((*tokens)[1].user, "ops");
  EXPECT_TRUE((*tokens)[1].admin);
  EXPECT_EQ((*tokens)[1].token, kRootToken);
  EXPECT_EQ(CountUnnamedTokens(*tokens), 0);
}

TEST(UserTokensTest, ABareTokenIsAnAdminNamedByItsDigest) {
  auto tokens = Parse(absl::StrCat(kAliceToken, "\n"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ((*tokens)[0].user, LegacyTokenUser(kAliceToken));
  EXPECT_THAT((*tokens)[0].user, ::testing::MatchesRegex("token-[0-9a-f]{8}"));
  EXPECT_TRUE((*tokens)[0].admin);
  EXPECT_EQ(CountUnnamedTokens(*tokens), 1);
}

TEST(UserTokensTest, AUserMayHoldSeveralTokensOfOneRole) {
  auto tokens = Parse(absl::StrCat("alice user ", kAliceToken, "\nalice user ", kRootToken, "\n"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 2u);
}

TEST(UserTokensTest, BadLinesAreRefusedNamingTheLine) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {absl::StrCat("alice ", kAliceToken), "line 1: expected `NAME ROLE TOKEN`"},
      {absl::StrCat("\nalice owner ", kAliceToken), "line 2: role \"owner\""},
      {absl::StrCat("Alice user ", kAliceToken), "line 1: user name \"Alice\""},
      {absl::StrCat("al ice user ", kAliceToken), "line 1: expected"},
      {absl::StrCat("-x user ", kAliceToken), "must start with a-z or 0-9"},
      {"alice user short", "line 1: token: a token must be at least"},
      {absl::StrCat("alice user ", kAliceToken, "\nbob user ", kAliceToken),
       "line 2: the same token as line 1"},
      {absl::StrCat("alice user ", kAliceToken, "\nalice admin ", kRootToken),
       "line 2: user alice is listed as both"},
      {"# nothing\n\n", "holds no token"},
      {absl::StrCat(std::string(65, 'a'), " user ", kAliceToken), "1 to 64 characters"},
  };
  for (const Case& c : cases) {
    auto tokens = Parse(c.text);
    ASSERT_FALSE(tokens.ok()) << c.text;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(tokens.status().message()), HasSubstr("--user_tokens_file"));
    EXPECT_THAT(std::string(tokens.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(UserTokensTest, ReadsAFileAndNamesItInErrors) {
  const std::string path = ::testing::TempDir() + "/users.token";
  {
    std::ofstream out(path);
    out << "alice user " << kAliceToken << "\nbob usr " << kRootToken << "\n";
  }
  auto tokens = ReadUserTokenFile("--user_tokens_file", path);
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(std::string(tokens.status().message()),
              HasSubstr(absl::StrCat("--user_tokens_file ", path, ": line 2: role \"usr\"")));
  EXPECT_EQ(ReadUserTokenFile("--user_tokens_file", path + ".missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

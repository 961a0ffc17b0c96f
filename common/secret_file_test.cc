#include "common/secret_file.h"

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

TEST(SecretFileTest, ReadsTokensSkippingCommentsAndBlankLines) {
  const std::string path =
      Write("tokens", "# users\n  aaaaaaaaaaaaaaaaaaaa  \n\nbbbbbbbbbbbbbbbbbbbb\n");
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile("--user_tokens_file", path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<std::string>{"aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"}));
}

TEST(SecretFileTest, RefusesMissingEmptyShortAndSpacedTokensNamingTheFlag) {
  for (const std::string& text : {std::string("# nothing\n"), std::string("short\n"),
                                  std::string("has a space in it, long enough\n")}) {
    absl::StatusOr<std::vector<std::string>> tokens =
        ReadTokenFile("--worker_token_file", Write("bad", text));
    ASSERT_FALSE(tokens.ok()) << text;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(tokens.status().message().find("--worker_token_file"), std::string::npos);
  }
  EXPECT_FALSE(ReadTokenFile("--x", Write("empty", "")).ok());
  EXPECT_FALSE(ReadTokenFile("--x", "/nonexistent/file").ok());
}

TEST(SecretFileTest, SingleTokenNeedsExactlyOne) {
  EXPECT_EQ(*ParseSingleToken("TESSERA_TOKEN", "abcdefghijklmnopq\n"), "abcdefghijklmnopq");
  EXPECT_FALSE(ParseSingleToken("TESSERA_TOKEN", "abcdefghijklmnopq\nabcdefghijklmnopr").ok());
  EXPECT_FALSE(ParseSingleToken("TESSERA_TOKEN", "").ok());
}

}  // namespace
}  // namespace tessera

// Token files round-trip in both widths; malformed files are rejected with
// the reason; text files become byte tokens.
#include "worker/data/token_file.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/text_to_tokens.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(TokenFile, RoundTripsNarrowAndWideTokens) {
  for (uint32_t big : {1000u, 70000u}) {
    std::vector<uint32_t> tokens = {0, 5, big, 17, 255};
    std::string path = TempPath(absl::StrCat("t", big, ".tok"));
    ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
    auto file = TokenFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ((*file)->size(), 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ((*file)->Token(i), tokens[i]);
    EXPECT_EQ((*file)->max_token(), big);
  }
}

TEST(TokenFile, MalformedFilesAreRejectedWithTheReason) {
  std::string path = TempPath("ok.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 3, 4}).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream out(TempPath(name), std::ios::binary);
    out << content;
    return TempPath(name);
  };
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  auto s1 = TokenFile::Open(write("magic.tok", bad_magic));
  EXPECT_EQ(s1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s1.status().message().find("bad magic"), std::string::npos);
  auto s2 = TokenFile::Open(write("trunc.tok", bytes.substr(0, bytes.size() - 2)));
  EXPECT_NE(s2.status().message().find("truncated"), std::string::npos) << s2.status();
  std::string v2 = bytes;
  v2[8] = 2;
  auto s3 = TokenFile::Open(write("v2.tok", v2));
  EXPECT_NE(s3.status().message().find("version 2"), std::string::npos) << s3.status();
  EXPECT_EQ(TokenFile::Open(TempPath("missing.tok")).status().code(), absl::StatusCode::kNotFound);
}

TEST(TextToTokens, BytesBecomeTokensInOrder) {
  std::string a = TempPath("a.txt"), b = TempPath("b.txt");
  std::ofstream(a) << "hi";
  std::ofstream(b) << "\xff!";
  ASSERT_TRUE(BuildByteTokenFileFromText({a, b}, TempPath("ab.tok")).ok());
  auto file = TokenFile::Open(TempPath("ab.tok"));
  ASSERT_TRUE(file.ok());
  ASSERT_EQ((*file)->size(), 4);
  EXPECT_EQ((*file)->Token(0), 'h');
  EXPECT_EQ((*file)->Token(2), 255u);
  EXPECT_EQ(BuildByteTokenFileFromText({TempPath("nope.txt")}, TempPath("x.tok")).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera

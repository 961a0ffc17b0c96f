// Text files become byte tokens, in order, recorded as byte-level, and a
// missing input is NOT_FOUND naming its path.
#include "client/text_to_tokens.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string WriteRaw(const std::string& name, const std::string& content) {
  std::ofstream out(TempPath(name), std::ios::binary);
  out << content;
  return TempPath(name);
}

TEST(TextToTokens, EveryByteBecomesOneTokenInFileOrder) {
  std::mt19937 rng(std::random_device{}());
  std::string a(500 + rng() % 100, '\0'), b(300, '\0');
  for (char& c : a) c = static_cast<char>(rng());
  for (char& c : b) c = static_cast<char>(rng());
  const std::string pa = WriteRaw("a.txt", a), pb = WriteRaw("b.txt", b);
  const std::string out = TempPath("ab.tok");
  ASSERT_TRUE(BuildByteTokenFileFromText({pa, pb}, out).ok());
  auto file = TokenFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string joined = a + b;
  ASSERT_EQ((*file)->size(), static_cast<int64_t>(joined.size()));
  for (size_t i = 0; i < joined.size(); ++i) {
    ASSERT_EQ((*file)->Token(i), static_cast<uint8_t>(joined[i])) << i;
  }
  EXPECT_LT((*file)->max_token(), 256u);
  EXPECT_EQ((*file)->tokenizer().kind, TokenizerKind::kByte);
  EXPECT_EQ((*file)->tokenizer().vocab_size, 256u);
  const std::string missing = TempPath("nope.txt");
  absl::Status s = BuildByteTokenFileFromText({pa, missing}, TempPath("x.tok"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera

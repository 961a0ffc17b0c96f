// Stored messages are cut within their bound, on a character boundary, and
// say that they were cut; short ones are kept as they are.
#include "server/request_limits.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(TruncateUtf8, KeepsShortTextAndCutsLongTextOnACharacterBoundary) {
  EXPECT_EQ(TruncateUtf8("short", 100), "short");
  EXPECT_EQ(TruncateUtf8(std::string(100, 'a'), 100), std::string(100, 'a'));
  const std::string cut = TruncateUtf8(std::string(1000, 'a'), 100);
  EXPECT_EQ(cut.size(), 100u);
  EXPECT_EQ(cut.substr(cut.size() - 12), " [truncated]");
  // Three-byte characters: every cut point lands on a boundary.
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xE2\x82\xAC";
  for (size_t max = 12; max < 40; ++max) {
    const std::string t = TruncateUtf8(euros, max);
    EXPECT_LE(t.size(), max);
    EXPECT_TRUE(ValidUtf8(t)) << max;
    EXPECT_NE(t.find("[truncated]"), std::string::npos) << max;
  }
  EXPECT_LE(TruncateUtf8(euros, 3).size(), 3u);
}

}  // namespace
}  // namespace tessera

// SHA-256 against the FIPS 180-2 test vectors, incremental hashing against
// one-shot, and reset after a digest.
#include "common/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(Sha256, MatchesPublishedVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, IncrementalEqualsOneShotAndResetsAfterDigest) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  Sha256 hasher;
  for (size_t i = 0; i < data.size(); i += 999) {
    hasher.Update(absl::string_view(data).substr(i, 999));
  }
  EXPECT_EQ(hasher.HexDigest(), Sha256Hex(data));
  hasher.Update("abc");
  EXPECT_EQ(hasher.HexDigest(), Sha256Hex("abc"));
}

TEST(Sha256, OneFlippedBitChangesTheDigest) {
  std::string data(4096, 'x');
  const std::string before = Sha256Hex(data);
  data[1234] ^= 1;
  EXPECT_NE(Sha256Hex(data), before);
}

}  // namespace
}  // namespace tessera

// Durable writes land under their final name with the digest of what was
// written; a writer dropped before Commit leaves nothing behind; bounded
// reads refuse missing files, symbolic links, directories and oversize files
// with distinct codes.
#include "common/durable_file.h"
#include "common/regular_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// The names in dir, sorted; none when it does not exist.
std::vector<std::string> Entries(const std::string& dir) {
  return ListDirectory(dir).value_or(std::vector<std::string>{});
}

TEST(DurableFile, CommitPublishesTheBytesAndTheirDigest) {
  const std::string dir = FreshDir("commit");
  auto writer = DurableFileWriter::Create(dir, "a.bin");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string big(3 << 20, 'q');  // larger than the writer's buffer
  ASSERT_TRUE((*writer)->Append("head").ok());
  ASSERT_TRUE((*writer)->Append(big).ok());
  EXPECT_EQ(ReadRegularFile(dir + "/a.bin", 1 << 30, Symlinks::kRefuse).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ((*writer)->size(), static_cast<int64_t>(4 + big.size()));
  EXPECT_EQ((*writer)->sha256(), Sha256Hex("head" + big));
  auto back = ReadRegularFile(dir + "/a.bin", 1 << 30, Symlinks::kRefuse);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "head" + big);
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"a.bin"});
  EXPECT_FALSE((*writer)->Append("more").ok());
}

TEST(DurableFile, AWriterDroppedBeforeCommitLeavesNoFile) {
  const std::string dir = FreshDir("dropped");
  {
    auto writer = DurableFileWriter::Create(dir, "b.bin");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("partial").ok());
    EXPECT_EQ(Entries(dir).size(), 1u);  // the temporary file
  }
  EXPECT_TRUE(Entries(dir).empty());
}

TEST(DurableFile, WriteIntoAMissingDirectoryFails) {
  EXPECT_EQ(WriteFileDurably(FreshDir("x") + "/no/such", "c", "data").code(),
            absl::StatusCode::kNotFound);
}

TEST(DurableFile, BoundedReadsRefuseWhatTheyShouldNotRead) {
  const std::string dir = FreshDir("reads");
  ASSERT_TRUE(WriteFileDurably(dir, "small", "0123456789").ok());
  EXPECT_EQ(ReadRegularFile(dir + "/small", 9, Symlinks::kRefuse).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*ReadRegularFile(dir + "/small", 10, Symlinks::kRefuse), "0123456789");
  ASSERT_EQ(symlink((dir + "/small").c_str(), (dir + "/link").c_str()), 0);
  EXPECT_EQ(ReadRegularFile(dir + "/link", 100, Symlinks::kRefuse).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadRegularFile(dir, 100, Symlinks::kRefuse).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadRegularFile(dir + "/none", 100, Symlinks::kRefuse).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera

// OpenRegularFile and ReadRegularFile beyond what the checkpoint readers'
// tests cover (durable_file_test): a FIFO, which a plain open would wait on
// for a writer forever, a directory and /dev/zero are refused at once as
// not regular files; a symbolic link is followed or refused as asked.
#include "common/regular_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(RegularFile, AFifoDirectoryOrDeviceIsRefusedWithoutWaiting) {
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string(std::getenv("TEST_TMPDIR")),
                                  std::string("/dev/zero")}) {
    for (Symlinks symlinks : {Symlinks::kFollow, Symlinks::kRefuse}) {
      absl::StatusOr<std::string> text = ReadRegularFile(path, 100, symlinks);
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << path;
      EXPECT_NE(text.status().message().find("is not a regular file"), std::string::npos)
          << text.status();
    }
  }
}

TEST(RegularFile, ALinkIsFollowedOrRefusedAsAsked) {
  const std::string target = TempPath("target.txt"), link = TempPath("link.txt");
  std::ofstream(target) << "hello";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  absl::StatusOr<std::string> followed = ReadRegularFile(link, 100, Symlinks::kFollow);
  ASSERT_TRUE(followed.ok()) << followed.status();
  EXPECT_EQ(*followed, "hello");
  absl::StatusOr<std::string> refused = ReadRegularFile(link, 100, Symlinks::kRefuse);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is a symbolic link"), std::string::npos);
  absl::StatusOr<int> fd = OpenRegularFile(target, Symlinks::kRefuse);
  ASSERT_TRUE(fd.ok()) << fd.status();
  char c;
  EXPECT_EQ(read(*fd, &c, 1), 1);  // blocking mode restored; an ordinary read
  close(*fd);
}

}  // namespace
}  // namespace tessera

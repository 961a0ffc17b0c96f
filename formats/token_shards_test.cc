// ListTokenShards: a file is itself, a directory its shards in sorted name
// order without hidden files, unfinished writes or subdirectories, and an
// empty or missing path an error naming it.
#include "formats/token_shards.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(ListTokenShardsTest, AFileIsItsOwnOnlyShard) {
  const std::string dir = FreshDir("single");
  ASSERT_TRUE(WriteTokenFile(dir + "/a.tok", {1, 2, 3}).ok());
  absl::StatusOr<std::vector<std::string>> files = ListTokenShards(dir + "/a.tok");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, std::vector<std::string>{dir + "/a.tok"});
}

TEST(ListTokenShardsTest, ADirectoryListsItsRegularFilesInSortedOrder) {
  const std::string dir = FreshDir("shards");
  for (const char* name : {"shard-10.tok", "shard-02.tok", "shard-01.tok"}) {
    ASSERT_TRUE(WriteTokenFile(dir + "/" + name, {1, 2, 3}).ok());
  }
  std::ofstream(dir + "/.hidden") << "x";
  std::ofstream(dir + "/shard-03.tok.tmp.1234") << "partial";
  ::mkdir((dir + "/nested").c_str(), 0755);
  ASSERT_TRUE(WriteTokenFile(dir + "/nested/inner.tok", {1}).ok());
  ASSERT_EQ(::symlink((dir + "/shard-01.tok").c_str(), (dir + "/shard-05.tok").c_str()), 0);
  absl::StatusOr<std::vector<std::string>> files = ListTokenShards(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/shard-01.tok", dir + "/shard-02.tok",
                                              dir + "/shard-05.tok", dir + "/shard-10.tok"}));
}

TEST(ListTokenShardsTest, AnEmptyDirectoryIsAnErrorNamingIt) {
  const std::string dir = FreshDir("empty");
  std::ofstream(dir + "/.only-hidden") << "x";
  absl::StatusOr<std::vector<std::string>> files = ListTokenShards(dir);
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(files.status().message().rfind(dir + ": directory holds no token files", 0), 0u)
      << files.status();
}

TEST(ListTokenShardsTest, AMissingPathIsNotFound) {
  absl::StatusOr<std::vector<std::string>> files = ListTokenShards(FreshDir("m") + "/absent");
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(files.status().message().find("absent"), std::string::npos);
}

}  // namespace
}  // namespace tessera

// Input names expand to files in a fixed order (directories recursively and
// sorted, dot-files skipped, globs expanded, "-" for standard input), gzip
// is recognised by its magic number whatever the name, and bad inputs are
// errors that name the input and the reason.
#include "client/text_inputs.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempDir() {
  static int counter = 0;
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/inputs", ++counter);
  mkdir(dir.c_str(), 0755);
  return dir;
}

void WritePlain(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

void WriteGzip(const std::string& path, const std::string& content) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, content.data(), content.size()), static_cast<int>(content.size()));
  gzclose(gz);
}

std::string RandomText(size_t bytes) {
  std::mt19937 rng(std::random_device{}());
  std::string text(bytes, ' ');
  for (char& c : text) c = static_cast<char>(rng() % 7 == 0 ? '\n' : 'a' + rng() % 26);
  return text;
}

absl::StatusOr<std::string> ReadAll(const TextInput& input) {
  absl::StatusOr<std::unique_ptr<TextInputReader>> reader = TextInputReader::Open(input);
  if (!reader.ok()) return reader.status();
  std::string text;
  for (;;) {
    absl::StatusOr<int64_t> n = (*reader)->Read(1000, &text);
    if (!n.ok()) return n.status();
    if (*n == 0) return text;
  }
}

std::vector<std::string> Paths(const std::vector<TextInput>& inputs) {
  std::vector<std::string> paths;
  for (const TextInput& input : inputs) paths.push_back(input.path);
  return paths;
}

TEST(TextInputs, DirectoriesAreWalkedSortedSkippingDotFiles) {
  const std::string dir = TempDir();
  mkdir((dir + "/b").c_str(), 0755);
  mkdir((dir + "/b/inner").c_str(), 0755);
  mkdir((dir + "/.git").c_str(), 0755);
  for (const char* name : {"/c.txt", "/a.txt", "/b/z.txt", "/b/inner/y.txt", "/.hidden",
                           "/b/.also_hidden", "/.git/config"}) {
    WritePlain(dir + name, "x\n");
  }
  ASSERT_EQ(symlink((dir + "/b").c_str(), (dir + "/d_link_to_dir").c_str()), 0);
  auto inputs = ExpandTextInputs({dir});
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(Paths(*inputs), (std::vector<std::string>{dir + "/a.txt", dir + "/b/inner/y.txt",
                                                      dir + "/b/z.txt", dir + "/c.txt"}));
  EXPECT_EQ((*inputs)[0].disk_bytes, 2);
}

TEST(TextInputs, GlobsExpandInSortedOrderAndNamesKeepTheirOrder) {
  const std::string dir = TempDir();
  for (const char* name : {"/b.txt", "/a.txt", "/c.log", "/a.gz"}) WritePlain(dir + name, "x");
  auto inputs = ExpandTextInputs({dir + "/c.log", dir + "/*.txt", dir + "/a.?z"});
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(Paths(*inputs), (std::vector<std::string>{dir + "/c.log", dir + "/a.txt",
                                                      dir + "/b.txt", dir + "/a.gz"}));
  // A name that exists is taken as it is, even with glob characters in it.
  WritePlain(dir + "/[odd].txt", "x");
  inputs = ExpandTextInputs({dir + "/[odd].txt"});
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(Paths(*inputs), std::vector<std::string>{dir + "/[odd].txt"});
}

TEST(TextInputs, BadNamesAreErrorsNamingThem) {
  const std::string dir = TempDir();
  struct Case {
    std::string name, reason;
  };
  mkdir((dir + "/empty").c_str(), 0755);
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0644), 0);
  for (const Case& c : std::vector<Case>{{dir + "/missing.txt", "no such file"},
                                         {dir + "/*.none", "matches no file"},
                                         {dir + "/empty", "holds no text file"},
                                         {dir + "/fifo", "not a regular file"}}) {
    auto inputs = ExpandTextInputs({c.name});
    ASSERT_FALSE(inputs.ok()) << c.name;
    EXPECT_EQ(inputs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(inputs.status().message().find(c.name), std::string::npos) << inputs.status();
    EXPECT_NE(inputs.status().message().find(c.reason), std::string::npos) << inputs.status();
  }
  EXPECT_FALSE(ExpandTextInputs({"-", "-"}).ok());
}

TEST(TextInputs, GzipIsFoundByItsMagicNumberNotItsName) {
  const std::string dir = TempDir();
  const std::string text = RandomText(300000);
  WriteGzip(dir + "/looks_plain.txt", text);
  WritePlain(dir + "/looks_gzip.gz", text);
  // Two gzip members one after the other read as one text.
  WriteGzip(dir + "/first.gz", text.substr(0, 1000));
  WriteGzip(dir + "/second.gz", text.substr(1000));
  {
    std::ofstream both(dir + "/both.gz", std::ios::binary);
    both << std::ifstream(dir + "/first.gz", std::ios::binary).rdbuf()
         << std::ifstream(dir + "/second.gz", std::ios::binary).rdbuf();
  }
  for (const char* name : {"/looks_plain.txt", "/looks_gzip.gz", "/both.gz"}) {
    auto inputs = ExpandTextInputs({dir + name});
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    auto read = ReadAll((*inputs)[0]);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(*read == text) << name;
  }
  auto reader = TextInputReader::Open({dir + "/looks_plain.txt", 0});
  ASSERT_TRUE(reader.ok());
  std::string some;
  ASSERT_TRUE((*reader)->Read(10, &some).ok());
  EXPECT_TRUE((*reader)->gzip());
  EXPECT_GT((*reader)->disk_bytes_read(), 0);
}

TEST(TextInputs, CorruptOrTruncatedGzipIsDataLossNamingTheFile) {
  const std::string dir = TempDir();
  WriteGzip(dir + "/good.gz", RandomText(100000));
  std::string bytes;
  {
    std::ifstream in(dir + "/good.gz", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  WritePlain(dir + "/truncated.gz", bytes.substr(0, bytes.size() / 2));
  std::string corrupt = bytes;
  for (size_t i = 20; i < 60; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  WritePlain(dir + "/corrupt.gz", corrupt);
  for (const char* name : {"/truncated.gz", "/corrupt.gz"}) {
    auto read = ReadAll({dir + name, 0});
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
    EXPECT_NE(read.status().message().find(dir + name), std::string::npos) << read.status();
  }
}

TEST(TextInputs, BinaryJunkIsReadAsIs) {
  const std::string dir = TempDir();
  std::mt19937 rng(std::random_device{}());
  std::string junk(70000, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  junk[0] = '\x1f';  // gzip's first magic byte, without the second
  junk[1] = 'x';
  WritePlain(dir + "/junk.bin", junk);
  auto read = ReadAll({dir + "/junk.bin", 0});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == junk);
}

TEST(TextInputs, StandardInputIsReadPlainOrGzip) {
  const std::string dir = TempDir();
  const std::string text = RandomText(50000);
  WriteGzip(dir + "/in.gz", text);
  auto inputs = ExpandTextInputs({"-"});
  ASSERT_TRUE(inputs.ok());
  ASSERT_EQ(inputs->size(), 1u);
  EXPECT_TRUE((*inputs)[0].is_stdin());
  EXPECT_EQ((*inputs)[0].disk_bytes, -1);
  const int saved = dup(STDIN_FILENO);
  ASSERT_NE(freopen((dir + "/in.gz").c_str(), "rb", stdin), nullptr);
  auto read = ReadAll((*inputs)[0]);
  dup2(saved, STDIN_FILENO);
  close(saved);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == text);
}

}  // namespace
}  // namespace tessera

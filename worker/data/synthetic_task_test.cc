// Synthetic tasks are deterministic per seed and correct: every addition
// line adds up and every copy line copies.
#include "worker/data/synthetic_task.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string AsText(const std::vector<uint32_t>& tokens) {
  std::string s;
  for (uint32_t t : tokens) s += static_cast<char>(t);
  return s;
}

TEST(SyntheticTask, AdditionLinesAreCorrectAndDeterministic) {
  v1::SyntheticData task;
  task.set_task(v1::SyntheticData::ADDITION);
  auto a = GenerateSyntheticTokens(task, 7, 5000);
  auto b = GenerateSyntheticTokens(task, 7, 5000);
  auto c = GenerateSyntheticTokens(task, 8, 5000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 5000u);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  std::vector<std::string> lines = absl::StrSplit(AsText(*a), '\n');
  lines.pop_back();  // the last line may be cut
  ASSERT_GT(lines.size(), 100u);
  for (const std::string& line : lines) {
    std::vector<std::string> lhs_rhs = absl::StrSplit(line, '=');
    ASSERT_EQ(lhs_rhs.size(), 2u) << line;
    std::vector<std::string> ops = absl::StrSplit(lhs_rhs[0], '+');
    ASSERT_EQ(ops.size(), 2u) << line;
    uint64_t x, y, z;
    ASSERT_TRUE(absl::SimpleAtoi(ops[0], &x) && absl::SimpleAtoi(ops[1], &y) &&
                absl::SimpleAtoi(lhs_rhs[1], &z)) << line;
    EXPECT_EQ(x + y, z) << line;
    EXPECT_LE(ops[0].size(), 3u);
  }
}

TEST(SyntheticTask, CopyLinesCopy) {
  v1::SyntheticData task;
  task.set_task(v1::SyntheticData::COPY);
  task.set_max_digits(5);
  auto tokens = GenerateSyntheticTokens(task, 3, 3000);
  ASSERT_TRUE(tokens.ok());
  std::vector<std::string> lines = absl::StrSplit(AsText(*tokens), '\n');
  lines.pop_back();
  for (const std::string& line : lines) {
    std::vector<std::string> halves = absl::StrSplit(line, '|');
    ASSERT_EQ(halves.size(), 2u) << line;
    EXPECT_EQ(halves[0], halves[1]);
    EXPECT_LE(halves[0].size(), 5u);
  }
  v1::SyntheticData none;
  EXPECT_FALSE(GenerateSyntheticTokens(none, 1, 10).ok());
}

}  // namespace
}  // namespace tessera

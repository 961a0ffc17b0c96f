// Synthetic tasks are deterministic per seed, differ across seeds, and are
// correct: every ADDITION line "a+b=c" adds up (operands of 1..max_digits
// digits, default 3) and every COPY line "<digits>|<digits>" copies (1..
// max_digits digits, default 8). Seeds are drawn fresh per run. Token
// counts beyond the limit are refused.
#include "common/synthetic_task.h"

#include <cstdlib>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string AsText(const std::vector<uint32_t>& tokens) {
  std::string s;
  for (uint32_t t : tokens) {
    EXPECT_LT(t, 256u);
    s += static_cast<char>(t);
  }
  return s;
}

// Complete lines only: the stream is cut at num_tokens, mid-line.
std::vector<std::string> Lines(const std::vector<uint32_t>& tokens) {
  std::vector<std::string> lines = absl::StrSplit(AsText(tokens), '\n');
  lines.pop_back();
  return lines;
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

v1::SyntheticData Task(v1::SyntheticData::Task kind, int max_digits = 0) {
  v1::SyntheticData task;
  task.set_task(kind);
  task.set_max_digits(max_digits);
  return task;
}

uint64_t FreshSeed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

TEST(SyntheticTask, DeterministicPerSeedAndDifferentAcrossSeeds) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  for (auto kind : {v1::SyntheticData::ADDITION, v1::SyntheticData::COPY}) {
    auto a = GenerateSyntheticTokens(Task(kind), seed, 5000);
    auto b = GenerateSyntheticTokens(Task(kind), seed, 5000);
    auto c = GenerateSyntheticTokens(Task(kind), seed + 1, 5000);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(a->size(), 5000u);
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
    // A longer stream starts with the shorter one.
    auto longer = GenerateSyntheticTokens(Task(kind), seed, 7000);
    ASSERT_TRUE(longer.ok());
    EXPECT_TRUE(std::equal(a->begin(), a->end(), longer->begin()));
  }
}

TEST(SyntheticTask, FixedSeedGivesAFixedStream) {
  // Pinned: a change to the generator would silently change every job's
  // data and break resumption from old checkpoints, so it must show here.
  auto tokens = GenerateSyntheticTokens(Task(v1::SyntheticData::ADDITION), 1234, 40);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(AsText(*tokens), "86+89=175\n964+7=971\n7+2=9\n455+9=464\n7+8=");
}

TEST(SyntheticTask, AdditionLinesAddUp) {
  for (int max_digits : {0, 1, 5, 18}) {
    const int limit = max_digits == 0 ? 3 : max_digits;
    auto tokens = GenerateSyntheticTokens(Task(v1::SyntheticData::ADDITION, max_digits),
                                          FreshSeed(), 20000);
    ASSERT_TRUE(tokens.ok());
    std::vector<std::string> lines = Lines(*tokens);
    ASSERT_GT(lines.size(), 200u);
    size_t longest = 0;
    for (const std::string& line : lines) {
      std::vector<std::string> lhs_rhs = absl::StrSplit(line, '=');
      ASSERT_EQ(lhs_rhs.size(), 2u) << line;
      std::vector<std::string> ops = absl::StrSplit(lhs_rhs[0], '+');
      ASSERT_EQ(ops.size(), 2u) << line;
      ASSERT_TRUE(AllDigits(ops[0]) && AllDigits(ops[1]) && AllDigits(lhs_rhs[1])) << line;
      uint64_t x, y, z;
      ASSERT_TRUE(absl::SimpleAtoi(ops[0], &x) && absl::SimpleAtoi(ops[1], &y) &&
                  absl::SimpleAtoi(lhs_rhs[1], &z))
          << line;
      EXPECT_EQ(x + y, z) << line;
      for (const std::string& op : ops) {
        EXPECT_LE(op.size(), static_cast<size_t>(limit)) << line;
        EXPECT_TRUE(op.size() == 1 || op[0] != '0') << "leading zero: " << line;
        longest = std::max(longest, op.size());
      }
    }
    EXPECT_EQ(longest, static_cast<size_t>(limit)) << "operand lengths never reach max_digits";
  }
}

TEST(SyntheticTask, CopyLinesCopy) {
  for (int max_digits : {0, 5}) {
    const int limit = max_digits == 0 ? 8 : max_digits;
    auto tokens =
        GenerateSyntheticTokens(Task(v1::SyntheticData::COPY, max_digits), FreshSeed(), 20000);
    ASSERT_TRUE(tokens.ok());
    std::vector<std::string> lines = Lines(*tokens);
    ASSERT_GT(lines.size(), 200u);
    size_t longest = 0;
    for (const std::string& line : lines) {
      std::vector<std::string> halves = absl::StrSplit(line, '|');
      ASSERT_EQ(halves.size(), 2u) << line;
      ASSERT_TRUE(AllDigits(halves[0])) << line;
      EXPECT_EQ(halves[0], halves[1]);
      EXPECT_LE(halves[0].size(), static_cast<size_t>(limit));
      longest = std::max(longest, halves[0].size());
    }
    EXPECT_EQ(longest, static_cast<size_t>(limit));
  }
}

TEST(SyntheticTask, BadRequestsAreInvalidArgument) {
  EXPECT_EQ(GenerateSyntheticTokens(v1::SyntheticData(), 1, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSyntheticTokens(Task(v1::SyntheticData::COPY), 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSyntheticTokens(Task(v1::SyntheticData::COPY, 19), 1, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticTask, TokenCountsBeyondTheLimitAreRefusedNotAllocated) {
  // 10^12 tokens once reached the allocator and aborted the worker.
  for (int64_t n : {kMaxSyntheticTokens + 1, int64_t{1'000'000'000'000}}) {
    auto tokens = GenerateSyntheticTokens(Task(v1::SyntheticData::ADDITION), 1, n);
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(tokens.status().message(),
              absl::StrCat("num_tokens: must be <= ", kMaxSyntheticTokens, " (got ", n, ")"));
  }
}

TEST(SyntheticTask, WritesATokenFileOfTheSameStream) {
  const uint64_t seed = FreshSeed();
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/copy.tok");
  ASSERT_TRUE(WriteSyntheticTokenFile(Task(v1::SyntheticData::COPY), seed, 3000, path).ok());
  auto tokens = GenerateSyntheticTokens(Task(v1::SyntheticData::COPY), seed, 3000);
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(tokens.ok() && file.ok());
  ASSERT_EQ((*file)->size(), 3000);
  for (int64_t i = 0; i < 3000; ++i) ASSERT_EQ((*file)->Token(i), (*tokens)[i]) << i;
}

}  // namespace
}  // namespace tessera

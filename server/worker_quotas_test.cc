// The quota file's format: users, the `*` line, `unlimited`, comments and
// blank lines; every bad line refused with the file, the line number and
// the reason; reading a file that is missing, not a regular file or too
// large.
#include "server/worker_quotas.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(WorkerQuotas, ParsesUsersTheDefaultUnlimitedCommentsAndBlankLines) {
  absl::StatusOr<WorkerQuotas> q = ParseWorkerQuotas("q.txt",
                                                     "# who may hold how many workers\n"
                                                     "\n"
                                                     "alice 2\n"
                                                     "  bob\t\t 16   # the big team\r\n"
                                                     "ops unlimited\n"
                                                     "intern-1.x 0\n"
                                                     "* 4\n");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->LimitFor("alice"), 2);
  EXPECT_EQ(q->LimitFor("bob"), 16);
  EXPECT_EQ(q->LimitFor("ops"), std::nullopt);
  EXPECT_EQ(q->LimitFor("intern-1.x"), 0);
  EXPECT_EQ(q->LimitFor("carol"), 4);  // not listed: the `*` line
  EXPECT_TRUE(q->FromDefault("carol"));
  EXPECT_FALSE(q->FromDefault("alice"));
  EXPECT_FALSE(q->FromDefault("ops"));
  // A job without an owner (no tokens checked) has no quota, even with `*`.
  EXPECT_EQ(q->LimitFor(""), std::nullopt);
  EXPECT_FALSE(q->FromDefault(""));
  EXPECT_EQ(q->Summary(), "alice 2, bob 16, intern-1.x 0, ops unlimited; others 4");
}

TEST(WorkerQuotas, WithoutADefaultLineUnlistedUsersHaveNoLimit) {
  absl::StatusOr<WorkerQuotas> q = ParseWorkerQuotas("q", "alice 1\n");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->LimitFor("alice"), 1);
  EXPECT_EQ(q->LimitFor("bob"), std::nullopt);
  EXPECT_FALSE(q->FromDefault("bob"));
  // `* unlimited` says the same.
  q = ParseWorkerQuotas("q", "alice 1\n* unlimited\n");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->LimitFor("bob"), std::nullopt);
  EXPECT_EQ(q->Summary(), "alice 1; others unlimited");
}

TEST(WorkerQuotas, AnEmptyOrCommentOnlyFileSetsNoLimits) {
  for (const char* text : {"", "\n\n", "# nobody is limited yet\n   # indented\n"}) {
    absl::StatusOr<WorkerQuotas> q = ParseWorkerQuotas("q", text);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_TRUE(q->per_user.empty());
    EXPECT_EQ(q->others, std::nullopt);
    EXPECT_EQ(q->LimitFor("alice"), std::nullopt);
    EXPECT_EQ(q->Summary(), "no user listed; others unlimited");
  }
}

TEST(WorkerQuotas, TheSummaryCountsUsersBeyondTheFirstEight) {
  std::string text;
  for (int i = 0; i < 11; ++i) absl::StrAppend(&text, "u", i, " 1\n");
  absl::StatusOr<WorkerQuotas> q = ParseWorkerQuotas("q", text);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(Has(q->Summary(), ", and 3 more; others unlimited")) << q->Summary();
}

struct BadLine {
  const char* text;
  const char* error;  // after "q.txt: line N: "
  int line;
};

class WorkerQuotasBadLineTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(WorkerQuotasBadLineTest, IsRefusedNamingTheFileTheLineAndWhy) {
  absl::StatusOr<WorkerQuotas> q = ParseWorkerQuotas("q.txt", GetParam().text);
  ASSERT_FALSE(q.ok()) << GetParam().text;
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(q.status().message());
  EXPECT_TRUE(Has(message, absl::StrCat("q.txt: line ", GetParam().line, ": "))) << message;
  EXPECT_TRUE(Has(message, GetParam().error)) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Lines, WorkerQuotasBadLineTest,
    ::testing::Values(
        BadLine{"alice\n", "expected `USER MAX_WORKERS` (USER: a user name or `*`), found 1", 1},
        BadLine{"# ok\nalice 2 3\n", "found 3 fields", 2},
        BadLine{"Alice 2\n", "user name \"Alice\" must start with a-z or 0-9", 1},
        BadLine{"alIce 2\n", "user name \"alIce\" may hold only a-z", 1},
        BadLine{"-alice 2\n", "user name \"-alice\" must start with a-z or 0-9", 1},
        BadLine{"al#ice 2\n", "found 1 fields", 1},  // '#' starts a comment
        BadLine{"alice -1\n", "MAX_WORKERS \"-1\" must be a whole number from 0 to 1000000", 1},
        BadLine{"alice +1\n", "MAX_WORKERS \"+1\"", 1},
        BadLine{"alice 2.5\n", "MAX_WORKERS \"2.5\"", 1},
        BadLine{"alice two\n", "MAX_WORKERS \"two\"", 1},
        BadLine{"alice 1000001\n", "MAX_WORKERS \"1000001\"", 1},
        BadLine{"alice 99999999999999999999\n", "MAX_WORKERS \"99999999999999999999\"", 1},
        BadLine{"alice Unlimited\n", "or `unlimited`", 1},
        BadLine{"alice 2\nbob 1\nalice 3\n", "user alice already has a quota on line 1", 3},
        BadLine{"* 2\n\n* 3\n", "`*` already has a quota on line 1", 3},
        BadLine{"** 2\n", "user name \"**\"", 1}, BadLine{"alice 2\nbob\x01 2\n", "user name", 2}));

TEST(WorkerQuotas, ReadsAFileAndRefusesOneItCannotRead) {
  const std::string path = TempPath("quotas.txt");
  std::ofstream(path) << "alice 3\n* 1\n";
  absl::StatusOr<WorkerQuotas> q = ReadWorkerQuotaFile(path);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->LimitFor("alice"), 3);
  EXPECT_EQ(q->LimitFor("bob"), 1);

  // A bad line names the file by its path.
  std::ofstream(path) << "alice 3\nbob lots\n";
  q = ReadWorkerQuotaFile(path);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(Has(std::string(q.status().message()), path + ": line 2: MAX_WORKERS \"lots\""))
      << q.status();

  const std::string missing = TempPath("no-such-quotas.txt");
  q = ReadWorkerQuotaFile(missing);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Has(std::string(q.status().message()), missing)) << q.status();

  q = ReadWorkerQuotaFile(std::getenv("TEST_TMPDIR"));  // a directory
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(Has(std::string(q.status().message()), "is not a regular file")) << q.status();

  EXPECT_FALSE(ReadWorkerQuotaFile("").ok());

  const std::string big = TempPath("big-quotas.txt");
  std::ofstream(big) << std::string(kMaxQuotaFileBytes + 1, '#');
  q = ReadWorkerQuotaFile(big);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(Has(std::string(q.status().message()), big)) << q.status();
}

}  // namespace
}  // namespace tessera

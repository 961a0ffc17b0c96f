// The failpoint spec parser (every accepted form and every refusal names the
// entry and the reason), matching by rank and step, fire-once, and the two
// actions that touch the process or the disk: exit (a SIGKILL, checked in a
// death test) and the byte flip of corrupt_checkpoint.
#include "worker/daemon/failpoints.h"

#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Failpoints, ParsesEveryActionAndPrintsItBack) {
  absl::StatusOr<std::vector<Failpoint>> parsed = Failpoints::Parse(
      " exit@rank=1,step=7; hang@step=5;fail_collective@step=4,rank=0;"
      "corrupt_checkpoint@rank=2,step=10;slow@rank=0,step=3,ms=200 ");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 5u);
  EXPECT_EQ((*parsed)[0].action, FailpointAction::kExit);
  EXPECT_EQ((*parsed)[0].rank, 1);
  EXPECT_EQ((*parsed)[0].step, 7);
  EXPECT_EQ((*parsed)[1].action, FailpointAction::kHang);
  EXPECT_EQ((*parsed)[1].rank, -1);  // any rank
  EXPECT_EQ((*parsed)[2].action, FailpointAction::kFailCollective);
  EXPECT_EQ((*parsed)[2].rank, 0);
  EXPECT_EQ((*parsed)[3].action, FailpointAction::kCorruptCheckpoint);
  EXPECT_EQ((*parsed)[4].action, FailpointAction::kSlow);
  EXPECT_EQ((*parsed)[4].ms, 200);
  Failpoints failpoints(*parsed);
  EXPECT_EQ(failpoints.ToString(),
            "exit@rank=1,step=7;hang@step=5;fail_collective@rank=0,step=4;"
            "corrupt_checkpoint@rank=2,step=10;slow@rank=0,step=3,ms=200");
}

TEST(Failpoints, AnEmptySpecArmsNothing) {
  for (const char* spec : {"", "   "}) {
    absl::StatusOr<std::vector<Failpoint>> parsed = Failpoints::Parse(spec);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(parsed->empty());
  }
}

TEST(Failpoints, MalformedEntriesAreRefusedNamingTheEntryAndTheReason) {
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"explode@step=1", "entry 1 \"explode@step=1\": unknown failpoint \"explode\" (known: exit,"},
      {"exit@step=1;bogus", "entry 2 \"bogus\": expected NAME@step=N"},
      {"exit", "entry 1 \"exit\": expected NAME@"},
      {"exit@rank=1", "step: must be given"},
      {"exit@step=1,step=2", "key \"step\" given twice"},
      {"exit@step=1,node=3", "unknown key \"node\""},
      {"exit@step", "\"step\" is not key=value"},
      {"exit@step=", "step: \"\" is not a number"},
      {"exit@step=-1", "step: \"-1\" is not a number"},
      {"exit@step=+1", "step: \"+1\" is not a number"},
      {"exit@step=1x", "step: \"1x\" is not a number"},
      {"exit@step=99999999999", "step: \"99999999999\" is not a number"},
      {"exit@step=1,ms=5", "ms: only slow takes it, not exit"},
      {"slow@step=1", "ms: slow needs it"},
      {"slow@step=1,ms=0", "ms: must be in [1, 600000] (got 0)"},
      {"slow@step=1,ms=5,steps=0", "steps: must be >= 1 (got 0)"},
      {"hang@step=1,steps=5", "steps: only slow takes it, not hang"},
      {"slow@step=1,ms=5,steps=2,steps=3", "key \"steps\" given twice"},
      {"exit@step=1;;hang@step=2", "entry 2 \"\": empty entry"},
      {"exit@step=1;", "entry 2 \"\": empty entry"},
      {"exit@step=1,", "\"\" is not key=value"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<Failpoint>> parsed = Failpoints::Parse(c.spec);
    ASSERT_FALSE(parsed.ok()) << c.spec;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(parsed.status().message().find(c.message), absl::string_view::npos)
        << c.spec << " -> " << parsed.status();
    EXPECT_NE(parsed.status().message().find("failpoints: entry "), absl::string_view::npos);
  }
}

TEST(Failpoints, MatchesRankAndStepAndFiresOnce) {
  Failpoints failpoints(*Failpoints::Parse(
      "fail_collective@rank=1,step=4;slow@step=2,ms=5;corrupt_checkpoint@rank=0,step=4"));
  EXPECT_FALSE(failpoints.TakeBeforeStep(0, 4).has_value());  // wrong rank
  EXPECT_FALSE(failpoints.TakeBeforeStep(1, 3).has_value());  // wrong step
  std::optional<Failpoint> fired = failpoints.TakeBeforeStep(1, 4);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->action, FailpointAction::kFailCollective);
  EXPECT_FALSE(failpoints.TakeBeforeStep(1, 4).has_value());  // once per process
  // No rank: any rank, but still once.
  ASSERT_TRUE(failpoints.TakeBeforeStep(3, 2).has_value());
  EXPECT_FALSE(failpoints.TakeBeforeStep(0, 2).has_value());
  // corrupt_checkpoint fires only after a checkpoint, and the step actions
  // never do.
  EXPECT_FALSE(failpoints.TakeAfterCheckpoint(1, 4).has_value());
  std::optional<Failpoint> corrupt = failpoints.TakeAfterCheckpoint(0, 4);
  ASSERT_TRUE(corrupt.has_value());
  EXPECT_EQ(corrupt->action, FailpointAction::kCorruptCheckpoint);
  EXPECT_FALSE(failpoints.TakeAfterCheckpoint(0, 4).has_value());
}

TEST(Failpoints, ASlowRangeDelaysEachOfItsStepsOnceAndNoOther) {
  absl::StatusOr<std::vector<Failpoint>> parsed =
      Failpoints::Parse("slow@rank=1,step=10,ms=20,steps=3");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].steps, 3);
  Failpoints failpoints(*parsed);
  EXPECT_EQ(failpoints.ToString(), "slow@rank=1,step=10,ms=20,steps=3");
  EXPECT_FALSE(failpoints.TakeBeforeStep(1, 9).has_value());
  EXPECT_FALSE(failpoints.TakeBeforeStep(0, 10).has_value());  // another rank
  for (int step = 10; step < 13; ++step) {
    std::optional<Failpoint> fired = failpoints.TakeBeforeStep(1, step);
    ASSERT_TRUE(fired.has_value()) << step;
    EXPECT_EQ(fired->ms, 20);
    EXPECT_FALSE(failpoints.TakeBeforeStep(1, step).has_value()) << step;  // once per step
  }
  EXPECT_FALSE(failpoints.TakeBeforeStep(1, 13).has_value());
  // Steps run again (a restart from a checkpoint in this process) are not slowed again.
  EXPECT_FALSE(failpoints.TakeBeforeStep(1, 11).has_value());
}

TEST(Failpoints, FlipOneByteChangesExactlyTheMiddleByte) {
  const std::string path = TempPath("flip.bin");
  const std::string original = "0123456789abcdef";
  WriteFile(path, original);
  ASSERT_TRUE(FlipOneByte(path).ok());
  const std::string flipped = ReadFile(path);
  ASSERT_EQ(flipped.size(), original.size());
  int differing = 0;
  for (size_t i = 0; i < original.size(); ++i) differing += flipped[i] != original[i];
  EXPECT_EQ(differing, 1);
  EXPECT_NE(flipped[original.size() / 2], original[original.size() / 2]);
}

TEST(Failpoints, FlipOneByteRefusesMissingAndEmptyFiles) {
  EXPECT_EQ(FlipOneByte(TempPath("no-such-file")).code(), absl::StatusCode::kNotFound);
  const std::string empty = TempPath("empty.bin");
  WriteFile(empty, "");
  EXPECT_EQ(FlipOneByte(empty).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FailpointsDeathTest, ExitKillsTheProcessWithSigkillAndSaysWhen) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Failpoint exit_point;
  exit_point.action = FailpointAction::kExit;
  exit_point.rank = 1;
  exit_point.step = 7;
  EXPECT_EXIT(KillThisProcessForFailpoint(exit_point), ::testing::KilledBySignal(SIGKILL),
              "failpoint exit@rank=1,step=7 fired: killing this process \\(time_unix_ms=[0-9]+\\)");
}

}  // namespace
}  // namespace tessera

// Checkpoint directory names and path checks, the commit marker (round trip,
// missing, corrupt, another step's), listing committed steps (uncommitted
// ones are skipped) and step removal.
#include "common/checkpoint_layout.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/durable_file.h"
#include "common/regular_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string FreshRoot(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(CheckpointLayout, StepDirNamesParseOnlyInTheirCanonicalForm) {
  EXPECT_EQ(StepDirName(42), "step-42");
  EXPECT_EQ(ParseStepDirName("step-42"), 42);
  EXPECT_EQ(ParseStepDirName("step-0"), 0);
  for (const char* bad : {"step-", "step-042", "step-4x", "step--1", "Step-4", "step-4.tmp",
                          "step-99999999999999999999"}) {
    EXPECT_FALSE(ParseStepDirName(bad).has_value()) << bad;
  }
}

TEST(CheckpointLayout, PathsThatCouldEscapeTheRootAreInvalidArguments) {
  EXPECT_TRUE(ValidateCheckpointRoot("/shared/ckpt").ok());
  EXPECT_TRUE(ValidateCheckpointRoot("relative/dir..x").ok());
  for (const std::string& bad : {std::string(""), std::string("/a/../etc"), std::string(".."),
                                std::string("a/..")}) {
    absl::Status s = ValidateCheckpointRoot(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("checkpoint.dir"), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(ValidateEntryName("rank-0.state").ok());
  for (const std::string& bad : {std::string(""), std::string("."), std::string(".."),
                                std::string("../x"), std::string("/etc/passwd"),
                                std::string("a\0b", 3), std::string(256, 'a')}) {
    EXPECT_EQ(ValidateEntryName(bad).code(), absl::StatusCode::kInvalidArgument);
  }
}

// A job's checkpoint directory is made whole at setup, parents included;
// a path that cannot become a directory is named with the right code.
TEST(CheckpointLayout, CreatingTheRootMakesEveryMissingParent) {
  const std::string base = FreshRoot("root-parents");
  const std::string root = base + "/runs/team/job-7";
  ASSERT_TRUE(CreateCheckpointRoot(root).ok());
  struct stat st;
  ASSERT_EQ(stat(root.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(CreateCheckpointRoot(root).ok());        // already there
  EXPECT_TRUE(CreateCheckpointRoot(root + "/").ok());  // a trailing slash
  ASSERT_TRUE(CreateStepDir(root, 3).ok());

  // A parent that is a file, and a root that is a file.
  const std::string file = base + "/runs/notes.txt";
  std::ofstream(file) << "not a directory";
  for (const std::string& bad : {file + "/job-8", file}) {
    absl::Status s = CreateCheckpointRoot(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message().rfind("checkpoint.dir: ", 0), 0u) << s;
    EXPECT_NE(s.message().find(file), std::string::npos) << s;
  }
  EXPECT_EQ(CreateCheckpointRoot(base + "/a/../b").code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointLayout, CommitMarkerRoundTripsAndCorruptionIsDataLoss) {
  const std::string root = FreshRoot("marker");
  ASSERT_TRUE(CreateStepDir(root, 7).ok());
  EXPECT_EQ(ReadCommitMarker(root, 7).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteCommitMarker(root, {7, 3}).ok());
  auto record = ReadCommitMarker(root, 7);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->step, 7);
  EXPECT_EQ(record->world_size, 3);

  const std::string path = StepDir(root, 7) + "/" + kCommitMarkerName;
  std::string text = *ReadRegularFile(path, 4096, Symlinks::kRefuse);
  text[text.find("world_size 3") + 11] = '4';
  std::ofstream(path, std::ios::trunc) << text;
  EXPECT_EQ(ReadCommitMarker(root, 7).status().code(), absl::StatusCode::kDataLoss);

  // A marker copied into another step's directory names the wrong step.
  ASSERT_TRUE(CreateStepDir(root, 8).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {7, 3}).ok());
  ASSERT_EQ(link(path.c_str(), (StepDir(root, 8) + "/" + kCommitMarkerName).c_str()), 0);
  EXPECT_EQ(ReadCommitMarker(root, 8).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointLayout, ListsCommittedStepsAndRemovesSteps) {
  const std::string root = FreshRoot("list");
  EXPECT_TRUE(ListCommittedSteps(root)->empty());  // no root yet
  for (int64_t step : {10, 2, 30}) ASSERT_TRUE(CreateStepDir(root, step).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {10, 1}).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {2, 1}).ok());
  ASSERT_TRUE(WriteFileDurably(StepDir(root, 30), "rank-0.manifest", "x").ok());
  mkdir((root + "/not-a-step").c_str(), 0755);
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{2, 10, 30}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{2, 10}));

  ASSERT_TRUE(RemoveStepDir(root, 10).ok());
  ASSERT_TRUE(RemoveStepDir(root, 30).ok());
  EXPECT_TRUE(RemoveStepDir(root, 99).ok());  // nothing there
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{2}));

  // Something other than files is left alone, with a reason.
  ASSERT_EQ(mkdir((StepDir(root, 2) + "/nested").c_str(), 0755), 0);
  EXPECT_EQ(RemoveStepDir(root, 2).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera

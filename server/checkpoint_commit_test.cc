// The coordinator's checkpoint bookkeeping on a real directory: resume_from
// resolution ("latest", a number, nothing committed, nothing left to run, a
// corrupt marker), commit only when every rank's manifest is visible, and
// pruning to keep_last (uncommitted older steps go, newer steps stay), and
// the change of FP8 recipe a resumed job's events record.
#include "server/checkpoint_commit.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/durable_file.h"
#include "formats/checkpoint_compatibility.h"
#include "formats/checkpoint_io.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string FreshRoot(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// step-<step> with `world` rank manifests, committed or not.
void MakeStep(const std::string& root, int step, int world, bool commit) {
  ASSERT_TRUE(CreateStepDir(root, step).ok());
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(WriteFileDurably(StepDir(root, step), RankManifestName(r), "m").ok());
  }
  if (commit) {
    ASSERT_TRUE(WriteCommitMarker(root, {step, world}).ok());
  }
}

v1::CheckpointConfig Config(const std::string& root, const std::string& from) {
  v1::CheckpointConfig c;
  c.set_dir(root);
  c.set_resume_from(from);
  return c;
}

TEST(CheckpointCommit, ResolvesResumeFromToACommittedStep) {
  const std::string root = FreshRoot("resolve");
  EXPECT_EQ(*ResolveResumeStep(Config(root, ""), 100), 0);
  EXPECT_EQ(ResolveResumeStep(Config(root, "latest"), 100).status().code(),
            absl::StatusCode::kNotFound);
  MakeStep(root, 10, 2, true);
  MakeStep(root, 20, 2, true);
  MakeStep(root, 30, 2, false);  // a write that never finished
  EXPECT_EQ(*ResolveResumeStep(Config(root, "latest"), 100), 20);
  EXPECT_EQ(*ResolveResumeStep(Config(root, "10"), 100), 10);
  absl::StatusOr<int> missing = ResolveResumeStep(Config(root, "30"), 100);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("step 30"), absl::string_view::npos);
  EXPECT_EQ(ResolveResumeStep(Config(root, "latest"), 20).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveResumeStep(Config(root, "ten"), 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveResumeStep(Config(root + "/../x", "latest"), 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::ofstream(StepDir(root, 20) + "/" + kCommitMarkerName, std::ios::app) << "tampered\n";
  EXPECT_EQ(ResolveResumeStep(Config(root, "latest"), 100).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CheckpointCommit, CommitsOnlyWhenEveryRankManifestIsVisible) {
  const std::string root = FreshRoot("commit");
  MakeStep(root, 5, 1, false);  // rank 1 of 2 wrote nowhere this coordinator sees
  absl::Status s = CommitStep(root, 5, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("shared"), absl::string_view::npos) << s;
  EXPECT_EQ(ReadCommitMarker(root, 5).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileDurably(StepDir(root, 5), RankManifestName(1), "m").ok());
  ASSERT_TRUE(CommitStep(root, 5, 2).ok());
  EXPECT_EQ(ReadCommitMarker(root, 5)->world_size, 2);
  ASSERT_TRUE(DiscardStep(root, 5).ok());
  EXPECT_TRUE(ListStepDirs(root)->empty());
}

TEST(CheckpointCommit, PrunesToKeepLastLeavingNewerSteps) {
  const std::string root = FreshRoot("prune");
  for (int step : {2, 4, 6}) MakeStep(root, step, 1, true);
  MakeStep(root, 5, 1, false);   // failed earlier: goes
  MakeStep(root, 12, 1, true);   // newer, from an earlier run: stays
  MakeStep(root, 8, 1, false);
  ASSERT_TRUE(CommitStep(root, 8, 1).ok());
  // Committing prunes nothing by itself.
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{2, 4, 5, 6, 8, 12}));
  ASSERT_TRUE(PruneSteps(root, 8, 2).ok());
  EXPECT_EQ(*ListStepDirs(root), (std::vector<int64_t>{6, 8, 12}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{6, 8, 12}));

  const std::string all = FreshRoot("keep-all");
  for (int step : {1, 2}) MakeStep(all, step, 1, true);
  MakeStep(all, 3, 1, false);
  ASSERT_TRUE(CommitStep(all, 3, 1).ok());
  ASSERT_TRUE(PruneSteps(all, 3, 0).ok());
  EXPECT_EQ(*ListCommittedSteps(all), (std::vector<int64_t>{1, 2, 3}));
}

// The coordinator reads the recipe rank 0's manifest records; it says
// nothing where the workers will refuse the checkpoint or it cannot tell.
TEST(CheckpointCommit, DescribesTheChangeOfFp8RecipeOfAResume) {
  const std::string root = FreshRoot("recipe");
  v1::JobSpec written;
  written.mutable_model()->set_d_model(32);
  written.mutable_fp8()->mutable_delayed()->set_amax_history_len(16);
  written.mutable_checkpoint()->set_dir(root);
  {
    auto writer = RankCheckpointWriter::Begin(root, 5, 0, 1, ManifestSpecOf(written));
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  EXPECT_EQ(DescribeResumeChange(written, 5), "");
  v1::JobSpec bf16 = written;
  bf16.mutable_fp8()->set_disabled(true);
  EXPECT_EQ(DescribeResumeChange(bf16, 5),
            "FP8 recipe changed from delayed scaling (amax history 16) to disabled (bf16)");
  v1::JobSpec wider = bf16;
  wider.mutable_model()->set_d_model(64);
  EXPECT_EQ(DescribeResumeChange(wider, 5), "");
  EXPECT_EQ(DescribeResumeChange(bf16, 6), "");
}

}  // namespace
}  // namespace tessera

// MakeRoomForCheckpoint: nothing is touched while the checkpoint fits; when
// short, only the committed steps keep_last would prune go, oldest first,
// and only until it fits; keep_last 0 prunes nothing. FreeBytesUnder
// measures a directory not made yet at its parent.
#include "server/checkpoint_space.h"

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// A disk of `capacity` bytes on which each committed step holds `per_step`.
struct FakeDisk {
  std::string root;
  int64_t capacity = 0, per_step = 0;
  absl::StatusOr<int64_t> Free(const std::string&) const {
    absl::StatusOr<std::vector<int64_t>> steps = ListCommittedSteps(root);
    if (!steps.ok()) return steps.status();
    return capacity - per_step * static_cast<int64_t>(steps->size());
  }
};

std::string RootWithSteps(const std::string& name, std::vector<int> steps) {
  const std::string root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  for (int s : steps) {
    EXPECT_TRUE(CreateStepDir(root, s).ok());
    EXPECT_TRUE(WriteCommitMarker(root, {s, 1}).ok());
  }
  return root;
}

TEST(CheckpointSpace, NothingIsPrunedWhileTheCheckpointFits) {
  FakeDisk disk{RootWithSteps("fits", {10, 20, 30}), 1000, 100};
  auto room = MakeRoomForCheckpoint(disk.root, 40, 500, 2,
                                    [&](const std::string& p) { return disk.Free(p); });
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_TRUE(room->fits());
  EXPECT_TRUE(room->pruned.empty());
  EXPECT_EQ(*ListCommittedSteps(disk.root), (std::vector<int64_t>{10, 20, 30}));
}

TEST(CheckpointSpace, WhenShortTheStepsKeepLastWouldPruneGoFirstOldestFirst) {
  // 1000 bytes, 3 steps of 250 held: 250 free, 400 needed. keep_last 3
  // lets the new step's commit prune 10; removing it frees enough.
  FakeDisk disk{RootWithSteps("short", {10, 20, 30}), 1000, 250};
  auto probe = [&](const std::string& p) { return disk.Free(p); };
  auto room = MakeRoomForCheckpoint(disk.root, 40, 400, 3, probe);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_TRUE(room->fits());
  EXPECT_EQ(room->pruned, (std::vector<int64_t>{10}));
  EXPECT_EQ(*ListCommittedSteps(disk.root), (std::vector<int64_t>{20, 30}));
}

TEST(CheckpointSpace, ItNeverPrunesBeyondKeepLastAndSaysWhenItStillDoesNotFit) {
  FakeDisk disk{RootWithSteps("never-fits", {10, 20, 30}), 1000, 250};
  auto probe = [&](const std::string& p) { return disk.Free(p); };
  // keep_last 2: 20 and 30 would leave after the commit only 30 stays,
  // so 10 and 20 may go; 750 free is still short of 900.
  auto room = MakeRoomForCheckpoint(disk.root, 40, 900, 2, probe);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_FALSE(room->fits());
  EXPECT_EQ(room->pruned, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(room->available, 750);
  EXPECT_EQ(*ListCommittedSteps(disk.root), (std::vector<int64_t>{30}));
  // keep_last 0 keeps every step: nothing is pruned.
  FakeDisk all{RootWithSteps("keep-all", {10, 20}), 500, 250};
  auto kept = MakeRoomForCheckpoint(all.root, 30, 400, 0,
                                    [&](const std::string& p) { return all.Free(p); });
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->fits());
  EXPECT_TRUE(kept->pruned.empty());
  // Steps at or above the new one are not this run's to prune.
  FakeDisk later{RootWithSteps("later-steps", {10, 50}), 500, 250};
  auto newer = MakeRoomForCheckpoint(later.root, 30, 400, 1,
                                     [&](const std::string& p) { return later.Free(p); });
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->pruned, (std::vector<int64_t>{10}));
  EXPECT_EQ(*ListCommittedSteps(later.root), (std::vector<int64_t>{50}));
}

TEST(CheckpointSpace, FreeBytesOfAPathNotMadeYetIsItsParentFilesystems) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  absl::StatusOr<int64_t> parent = FreeBytesUnder(tmp);
  absl::StatusOr<int64_t> missing = FreeBytesUnder(tmp + "/not/made/yet");
  ASSERT_TRUE(parent.ok()) << parent.status();
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_GT(*parent, 0);
  // The same filesystem; other writers may change it slightly meanwhile.
  EXPECT_NEAR(static_cast<double>(*missing), static_cast<double>(*parent), 64.0 * (1 << 20));
}

}  // namespace
}  // namespace tessera

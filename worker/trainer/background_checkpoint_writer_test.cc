// BackgroundCheckpointWriter: the bytes it is given land verified on disk
// while the caller goes on; one write at a time; a cancelled or failed write
// leaves nothing behind and says why.
#include "worker/trainer/background_checkpoint_writer.h"

#include <sys/stat.h>

#include <random>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/checkpoint_layout.h"
#include "formats/checkpoint_io.h"
#include "gtest/gtest.h"
#include "worker/trainer/test_files.h"

namespace tessera {
namespace {

const std::string kSpecHash(64, 'a');

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

CheckpointWriteRequest Request(const std::string& root, int64_t step, const std::string& data) {
  return CheckpointWriteRequest{root, step, 0, 1, ManifestSpec{kSpecHash}, "rank-0.state", data.data(),
                                data.size()};
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(BackgroundCheckpointWriterTest, WritesVerifiedFilesAndReportsThem) {
  const std::string root = TestDir("bg-writer");
  // Larger than one chunk, so the write takes several appends.
  const std::string data = RandomBytes((size_t{64} << 20) + 12345, 1);
  BackgroundCheckpointWriter writer;
  ASSERT_TRUE(writer.Start(Request(root, 7, data)).ok());
  absl::StatusOr<CheckpointWritten> written = writer.Await(7);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->bytes, static_cast<int64_t>(data.size()));
  EXPECT_EQ(written->manifest_path, StepDir(root, 7) + "/rank-0.manifest");
  EXPECT_GE(written->write_s, 0.0);
  absl::StatusOr<RankManifest> manifest = ReadRankManifest(root, 7, 0);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->spec.hash, kSpecHash);
  absl::StatusOr<std::string> back = ReadVerifiedFile(root, *manifest, "rank-0.state");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data);
  // The result stays available to a second reader.
  EXPECT_TRUE(writer.Await(7).ok());
}

TEST(BackgroundCheckpointWriterTest, OneWriteAtATimeAndWaitIdleWaitsForIt) {
  const std::string root = TestDir("bg-writer-busy");
  const std::string data = RandomBytes(4096, 2);
  absl::Notification release;
  BackgroundCheckpointWriter writer;
  writer.set_before_write_for_test([&] { release.WaitForNotification(); });
  ASSERT_TRUE(writer.Start(Request(root, 1, data)).ok());
  absl::Status second = writer.Start(Request(root, 2, data));
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("step 1"), std::string::npos) << second;
  EXPECT_FALSE(Exists(StepDir(root, 1) + "/rank-0.manifest"));
  release.Notify();
  EXPECT_GE(writer.WaitIdle(), 0.0);
  EXPECT_TRUE(Exists(StepDir(root, 1) + "/rank-0.manifest"));
  ASSERT_TRUE(writer.Start(Request(root, 2, data)).ok());
  EXPECT_TRUE(writer.Await(2).ok());
  EXPECT_TRUE(writer.Await(1).ok());  // earlier results are kept
}

TEST(BackgroundCheckpointWriterTest, CancelStopsTheWriteAndRemovesItsFiles) {
  const std::string root = TestDir("bg-writer-cancel");
  const std::string data = RandomBytes(1 << 20, 3);
  absl::Notification release;
  BackgroundCheckpointWriter writer;
  writer.set_before_write_for_test([&] { release.WaitForNotification(); });
  ASSERT_TRUE(writer.Start(Request(root, 4, data)).ok());
  writer.Cancel();
  release.Notify();
  absl::StatusOr<CheckpointWritten> written = writer.Await(4);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kCancelled) << written.status();
  EXPECT_FALSE(Exists(StepDir(root, 4)));
}

TEST(BackgroundCheckpointWriterTest, AFailedWriteReportsItsError) {
  const std::string root = TestDir("bg-writer-fail");
  // The checkpoint root is a file: the step directory cannot be made.
  const std::string file_root = root + "/not-a-directory";
  WriteStringToFile(file_root, "x");
  const std::string data = RandomBytes(100, 4);
  BackgroundCheckpointWriter writer;
  ASSERT_TRUE(writer.Start(Request(file_root, 3, data)).ok());
  absl::StatusOr<CheckpointWritten> written = writer.Await(3);
  EXPECT_FALSE(written.ok());
  EXPECT_NE(written.status().message().find("not-a-directory"), std::string::npos)
      << written.status();
}

TEST(BackgroundCheckpointWriterTest, AwaitOfAStepNeverStartedIsAPreconditionError) {
  BackgroundCheckpointWriter writer;
  EXPECT_EQ(writer.Await(5).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera

// The scratch-buffer lifetime rule without a device, over an allocator
// that records what it hands out and takes back: a buffer grows to the
// largest request and is reused; before any capture an outgrown buffer is
// freed at once; after a capture it is kept until the buffer goes, so the
// captured work's pointer stays valid; a failed growth leaves no stale
// pointer for the next, smaller request. Runs in CI (no GPU).
#include "worker/engine/cuda/scratch_buffer.h"

#include <cstdlib>
#include <set>

#include "gtest/gtest.h"

namespace tessera {
namespace cuda {
namespace {

class RecordingAllocator : public ScratchAllocator {
 public:
  ~RecordingAllocator() override { EXPECT_TRUE(live_.empty()) << "leaked " << live_.size(); }
  absl::Status Allocate(void** p, size_t bytes) override {
    if (bytes > limit_) {
      *p = nullptr;
      return absl::ResourceExhaustedError("out of memory");
    }
    *p = std::malloc(bytes);
    live_.insert(*p);
    return absl::OkStatus();
  }
  void Free(void* p) override {
    EXPECT_EQ(live_.erase(p), 1u) << "freed what was not live";
    std::free(p);
  }
  bool live(void* p) const { return live_.count(p) > 0; }
  size_t live_count() const { return live_.size(); }
  size_t limit_ = size_t{1} << 20;

 private:
  std::set<void*> live_;
};

TEST(ScratchBuffer, GrowsToTheLargestRequestAndReusesIt) {
  RecordingAllocator allocator;
  CaptureRecord record;
  ScratchBuffer scratch(&allocator, &record);
  auto a = scratch.Get(256);
  ASSERT_TRUE(a.ok());
  auto b = scratch.Get(64);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(scratch.bytes(), 256u);
  auto c = scratch.Get(256);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*a, *c);
  EXPECT_EQ(allocator.live_count(), 1u);
}

TEST(ScratchBuffer, BeforeAnyCaptureAnOutgrownBufferIsFreed) {
  RecordingAllocator allocator;
  CaptureRecord record;
  ScratchBuffer scratch(&allocator, &record);
  auto small = scratch.Get(64);
  ASSERT_TRUE(small.ok());
  auto large = scratch.Get(4096);
  ASSERT_TRUE(large.ok());
  EXPECT_EQ(allocator.live_count(), 1u);
  EXPECT_TRUE(allocator.live(*large));
  EXPECT_EQ(scratch.retired(), 0u);
}

TEST(ScratchBuffer, AfterACaptureAnOutgrownBufferLivesAsLongAsTheBuffer) {
  RecordingAllocator allocator;
  CaptureRecord record;
  void* captured_pointer = nullptr;
  {
    ScratchBuffer scratch(&allocator, &record);
    auto small = scratch.Get(64);
    ASSERT_TRUE(small.ok());
    captured_pointer = *small;  // what a graph captured now would keep
    record.NoteCapture();
    auto large = scratch.Get(4096);
    ASSERT_TRUE(large.ok());
    EXPECT_NE(*large, captured_pointer);
    EXPECT_TRUE(allocator.live(captured_pointer)) << "freed under the captured work";
    EXPECT_EQ(scratch.retired(), 1u);
    auto larger = scratch.Get(8192);
    ASSERT_TRUE(larger.ok());
    EXPECT_TRUE(allocator.live(*large));  // it may have been captured too
    EXPECT_EQ(scratch.retired(), 2u);
    EXPECT_EQ(allocator.live_count(), 3u);
  }
  EXPECT_EQ(allocator.live_count(), 0u);  // all freed with the buffer
}

TEST(ScratchBuffer, AFailedGrowthLeavesNoStalePointerForTheNextSmallerRequest) {
  for (bool captured : {false, true}) {
    SCOPED_TRACE(captured ? "after a capture" : "before any capture");
    RecordingAllocator allocator;
    CaptureRecord record;
    ScratchBuffer scratch(&allocator, &record);
    auto first = scratch.Get(512);
    ASSERT_TRUE(first.ok());
    void* old = *first;
    if (captured) record.NoteCapture();
    auto huge = scratch.Get(allocator.limit_ + 1);
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(scratch.bytes(), 0u);
    EXPECT_EQ(allocator.live(old), captured);  // retired after a capture, else freed
    auto next = scratch.Get(256);
    ASSERT_TRUE(next.ok());
    EXPECT_NE(*next, nullptr);
    EXPECT_TRUE(allocator.live(*next));
    EXPECT_EQ(scratch.bytes(), 256u);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace tessera

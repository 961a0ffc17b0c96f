// The orphan aborter: requests never block, a job is aborted once however
// often the coordinator repeats it while the abort runs, later requests for
// it are honoured again, and destruction does not hang.
#include "worker/daemon/orphan_aborter.h"

#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Recorder {
  absl::Mutex mu;
  std::vector<std::string> aborted;
  void Add(const std::string& job) {
    absl::MutexLock lock(&mu);
    aborted.push_back(job);
  }
  bool WaitForCount(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return aborted.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu);
    return aborted;
  }
};

TEST(OrphanAborter, RepeatedRequestsWhileAnAbortRunsAbortOnceWithoutBlocking) {
  Recorder recorder;
  absl::Notification release;
  OrphanAborter aborter([&](const std::string& job) {
    recorder.Add(job);
    if (job == "job-1") release.WaitForNotification();  // a collective still waiting
  });
  const absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) aborter.Request("job-1");  // one per heartbeat
  aborter.Request("job-2");
  aborter.Request("");  // ignored
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_TRUE(recorder.WaitForCount(1));
  release.Notify();
  ASSERT_TRUE(recorder.WaitForCount(2));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(recorder.Get(), (std::vector<std::string>{"job-1", "job-2"}));
}

TEST(OrphanAborter, AJobIsAbortedAgainWhenAskedAfterItsAbortFinished) {
  Recorder recorder;
  OrphanAborter aborter([&](const std::string& job) { recorder.Add(job); });
  aborter.Request("job-1");
  ASSERT_TRUE(recorder.WaitForCount(1));
  // Give the loop time to forget job-1 (the abort returned).
  for (int i = 0; i < 100 && recorder.Get().size() < 2; ++i) {
    aborter.Request("job-1");
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(recorder.Get().size(), 2u);
}

TEST(OrphanAborter, DestructionDropsQueuedJobsAndReturns) {
  Recorder recorder;
  absl::Notification release;
  {
    OrphanAborter aborter([&](const std::string& job) {
      recorder.Add(job);
      release.WaitForNotification();
    });
    aborter.Request("job-1");
    aborter.Request("job-2");
    ASSERT_TRUE(recorder.WaitForCount(1));
    release.Notify();
  }
  EXPECT_EQ(recorder.Get().front(), "job-1");
  EXPECT_LE(recorder.Get().size(), 2u);
}

}  // namespace
}  // namespace tessera

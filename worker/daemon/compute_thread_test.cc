// ComputeThread: every task runs on the one thread it owns (never the
// caller's), tasks from many callers run one at a time, and each Run returns
// only after its task finished.
#include "worker/daemon/compute_thread.h"

#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ComputeThread, RunsEveryTaskOnItsOwnThread) {
  ComputeThread compute;
  std::set<std::thread::id> seen;
  for (int i = 0; i < 5; ++i) {
    compute.Run([&] { seen.insert(std::this_thread::get_id()); });
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(*seen.begin(), compute.id());
  EXPECT_NE(compute.id(), std::this_thread::get_id());
}

TEST(ComputeThread, SerialisesConcurrentCallersAndWaitsForEachTask) {
  ComputeThread compute;
  std::mt19937 rng(std::random_device{}());
  const int kCallers = 4;
  const int kTasksEach = 2 + static_cast<int>(rng() % 20);
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> unfinished_returns{0};
  int64_t sum = 0;  // only touched on the compute thread
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int t = 0; t < kTasksEach; ++t) {
        bool finished = false;
        compute.Run([&] {
          if (inside.fetch_add(1) != 0) overlaps++;
          sum += c * 1000 + t;
          std::this_thread::yield();
          inside.fetch_sub(1);
          finished = true;
        });
        if (!finished) unfinished_returns++;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(unfinished_returns.load(), 0);
  int64_t want = 0;
  for (int c = 0; c < kCallers; ++c) {
    for (int t = 0; t < kTasksEach; ++t) want += c * 1000 + t;
  }
  EXPECT_EQ(sum, want);
}

}  // namespace
}  // namespace tessera

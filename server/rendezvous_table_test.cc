// Rendezvous: Get waits for keys set later, times out naming missing keys,
// Add counts atomically, and jobs are isolated and dropped.
#include "server/rendezvous_table.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(RendezvousTable, GetWaitsForKeysSetLater) {
  RendezvousTable table;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    table.Set("job-1", "a", "1");
    table.Set("job-1", "b", "2");
  });
  auto values = table.Get("job-1", {"a", "b"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2"}));
}

TEST(RendezvousTable, TimeoutNamesMissingKeysAndJobsAreIsolated) {
  RendezvousTable table;
  table.Set("job-1", "a", "x");
  auto missing = table.Get("job-2", {"a"}, absl::Milliseconds(20));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("a"), std::string::npos);
  table.DropJob("job-1");
  EXPECT_FALSE(table.Get("job-1", {"a"}, absl::Milliseconds(10)).ok());
}

TEST(RendezvousTable, AddCountsAcrossThreads) {
  RendezvousTable table;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 100; ++j) ASSERT_TRUE(table.Add("job-1", "n", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*table.Add("job-1", "n", 0), 800);
  table.Set("job-1", "s", "text");
  EXPECT_EQ(table.Add("job-1", "s", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera

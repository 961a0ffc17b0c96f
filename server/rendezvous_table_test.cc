// Rendezvous: Get waits for keys set later, times out naming missing keys
// (a bounded number of them), Add counts atomically, jobs are isolated and
// dropped, and ids, keys, values and key lists are bounded.
#include "server/rendezvous_table.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/request_limits.h"

namespace tessera {
namespace {

TEST(RendezvousTable, GetWaitsForKeysSetLater) {
  RendezvousTable table;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_TRUE(table.Set("job-1", "a", "1").ok());
    ASSERT_TRUE(table.Set("job-1", "b", "2").ok());
  });
  auto values = table.Get("job-1", {"a", "b"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2"}));
}

TEST(RendezvousTable, TimeoutNamesMissingKeysAndJobsAreIsolated) {
  RendezvousTable table;
  ASSERT_TRUE(table.Set("job-1", "a", "x").ok());
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
  ASSERT_TRUE(table.Set("job-1", "s", "text").ok());
  EXPECT_EQ(table.Add("job-1", "s", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RendezvousTable, OversizedIdsKeysValuesAndKeyListsAreInvalidArgument) {
  RendezvousTable table;
  const std::string long_id(kMaxIdBytes + 1, 'j');
  const std::string long_key(kMaxRendezvousKeyBytes + 1, 'k');
  EXPECT_EQ(table.Set(long_id, "a", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Set("job-1", long_key, "x").message(),
            absl::StrCat("key: must be at most ", kMaxRendezvousKeyBytes, " bytes (got ",
                         long_key.size(), ")"));
  EXPECT_EQ(table.Set("job-1", "a", std::string(kMaxRendezvousValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.Set("job-1", "a", std::string(kMaxRendezvousValueBytes, 'v')).ok());
  EXPECT_EQ(table.Add("job-1", long_key, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Get("job-1", {"a", long_key}, absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> many(kMaxRendezvousKeysPerGet + 1, "a");
  EXPECT_EQ(table.Get("job-1", many, absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A timeout names the first few missing keys, not thousands.
  std::vector<std::string> missing;
  for (int i = 0; i < 1000; ++i) missing.push_back(absl::StrCat("rank/", i));
  auto timed_out = table.Get("job-1", missing, absl::Milliseconds(1));
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(timed_out.status().message().find("rank/0, rank/1"), std::string::npos);
  EXPECT_NE(timed_out.status().message().find("and 992 more"), std::string::npos)
      << timed_out.status();
  EXPECT_LT(timed_out.status().message().size(), 200u);
}

}  // namespace
}  // namespace tessera

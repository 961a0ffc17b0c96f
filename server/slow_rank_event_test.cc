// The slow-rank event's severity and message, and the job record's list of
// slow ranks as ranks are named and cleared.
#include "server/slow_rank_event.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

StragglerChange Change(int rank, bool slow, double slowdown) {
  StragglerChange c;
  c.rank = rank;
  c.slow = slow;
  c.step = 149;
  c.window_steps = 50;
  c.median_compute_s = 0.02;
  c.rank_compute_s = 0.02 * (1 + slowdown);
  c.slowdown = slowdown;
  return c;
}

TEST(SlowRankEvent, NamedRankIsAWarningNamingWorkerAddressSlowdownAndWindow) {
  const v1::SlowRankChange e = MakeSlowRankChange(Change(1, true, 0.35), "w-2", "10.0.0.7:40121");
  EXPECT_EQ(e.severity(), v1::WARNING);
  EXPECT_TRUE(e.slow());
  EXPECT_EQ(e.rank().worker_id(), "w-2");
  EXPECT_EQ(e.rank().address(), "10.0.0.7:40121");
  EXPECT_EQ(e.rank().window_steps(), 50);
  EXPECT_EQ(e.message(),
            "rank 1 (worker w-2 at 10.0.0.7:40121) is 35% slower than the median rank over the "
            "last 50 steps (steps 100-149): its median compute time per step is 0.0270 s "
            "against 0.0200 s");
}

TEST(SlowRankEvent, ClearedRankIsInfo) {
  const v1::SlowRankChange e = MakeSlowRankChange(Change(0, false, 0.02), "w-1", "");
  EXPECT_EQ(e.severity(), v1::INFO);
  EXPECT_FALSE(e.slow());
  EXPECT_NE(e.message().find("rank 0 (worker w-1 at an unknown address) is no longer slow: +2%"),
            std::string::npos)
      << e.message();
}

TEST(SlowRankEvent, JobRecordKeepsTheNamedRanksInRankOrder) {
  v1::Job job;
  ApplySlowRankChange(MakeSlowRankChange(Change(3, true, 0.5), "w-4", "h:4"), job);
  ApplySlowRankChange(MakeSlowRankChange(Change(1, true, 0.2), "w-2", "h:2"), job);
  ASSERT_EQ(job.slow_ranks_size(), 2);
  EXPECT_EQ(job.slow_ranks(0).rank(), 1);
  EXPECT_EQ(job.slow_ranks(1).rank(), 3);
  ApplySlowRankChange(MakeSlowRankChange(Change(3, false, 0.01), "w-4", "h:4"), job);
  ASSERT_EQ(job.slow_ranks_size(), 1);
  EXPECT_EQ(job.slow_ranks(0).worker_id(), "w-2");
}

}  // namespace
}  // namespace tessera

// Event log replay from a step, waiting for new events, closing, the bound
// on retained step metrics (state changes and errors are all kept), and
// restoring a persisted history that later events continue.
#include "server/event_log.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobEvent Step(int step) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  return e;
}

v1::JobEvent State(v1::JobState s) {
  v1::JobEvent e;
  e.mutable_state_change()->set_state(s);
  return e;
}

TEST(EventLog, ReplaysFromAStepAndKeepsStateChanges) {
  EventLog log;
  log.Append(State(v1::RUNNING), false);
  for (int i = 0; i < 5; ++i) log.Append(Step(i), false);
  log.Append(State(v1::SUCCEEDED), true);
  EventLog::Batch b = log.Read(0, 3, absl::ZeroDuration());
  ASSERT_EQ(b.events.size(), 4u);
  EXPECT_TRUE(b.events[0].has_state_change());
  EXPECT_EQ(b.events[1].step().step(), 3);
  EXPECT_EQ(b.events[2].step().step(), 4);
  EXPECT_TRUE(b.closed);
  EXPECT_EQ(b.events[3].sequence(), 7);
  log.Append(Step(9), false);  // ignored after close
  EXPECT_EQ(log.Read(b.next_cursor, 0, absl::ZeroDuration()).events.size(), 0u);
}

TEST(EventLog, ReadWaitsForTheNextEvent) {
  EventLog log;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    log.Append(Step(0), false);
  });
  EventLog::Batch b = log.Read(0, 0, absl::Seconds(10));
  writer.join();
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_FALSE(b.closed);
  EventLog::Batch none = log.Read(b.next_cursor, 0, absl::Milliseconds(10));
  EXPECT_TRUE(none.events.empty());
}

TEST(EventLog, KeepsOnlyTheMostRecentStepsButEveryOtherEvent) {
  EventLog log(/*max_step_events=*/3);
  log.Append(State(v1::RUNNING), false);
  for (int i = 0; i < 10; ++i) {
    log.Append(Step(i), false);
    if (i == 8) {
      v1::JobEvent error;
      error.mutable_worker_error()->set_worker_id("w-1");
      log.Append(error, false);
    }
  }
  log.Append(State(v1::SUCCEEDED), true);
  EventLog::Batch all = log.Read(0, 0, absl::ZeroDuration());
  ASSERT_EQ(all.events.size(), 6u);
  EXPECT_EQ(all.events[0].state_change().state(), v1::RUNNING);
  EXPECT_EQ(all.events[1].step().step(), 7);
  EXPECT_EQ(all.events[2].step().step(), 8);
  EXPECT_EQ(all.events[3].worker_error().worker_id(), "w-1");
  EXPECT_EQ(all.events[4].step().step(), 9);
  EXPECT_EQ(all.events[5].state_change().state(), v1::SUCCEEDED);
  for (size_t i = 1; i < all.events.size(); ++i) {
    EXPECT_GT(all.events[i].sequence(), all.events[i - 1].sequence());
  }
  EXPECT_EQ(all.next_cursor, all.events.back().sequence());
  // A reader that already saw step 8 gets only what followed it.
  EventLog::Batch rest = log.Read(all.events[2].sequence(), 0, absl::ZeroDuration());
  ASSERT_EQ(rest.events.size(), 3u);
  EXPECT_TRUE(rest.events[0].has_worker_error());
  EXPECT_EQ(rest.events[1].step().step(), 9);
}

// FP8 statistics records are kept, trimmed and replayed like the step
// records they follow: a long job's memory does not grow with them.
TEST(EventLog, Fp8RecordsAreKeptAsStepRecords) {
  EventLog log(/*max_step_events=*/4);
  for (int i = 0; i < 6; ++i) {
    log.Append(Step(i), false);
    v1::JobEvent numerics;
    numerics.mutable_numerics()->set_step(i);
    log.Append(numerics, false);
  }
  EventLog::Batch all = log.Read(0, 0, absl::ZeroDuration());
  ASSERT_EQ(all.events.size(), 4u);
  EXPECT_EQ(all.events[0].step().step(), 4);
  EXPECT_EQ(all.events[1].numerics().step(), 4);
  EXPECT_EQ(all.events[3].numerics().step(), 5);
  EventLog::Batch from5 = log.Read(0, /*from_step=*/5, absl::ZeroDuration());
  ASSERT_EQ(from5.events.size(), 2u);
  EXPECT_EQ(from5.events[1].numerics().step(), 5);
}

TEST(EventLog, ARestoredHistoryKeepsItsSequencesAndLaterEventsFollowIt) {
  EventLog original;
  std::vector<v1::JobEvent> persisted;
  persisted.push_back(original.Append(State(v1::RUNNING), false));
  for (int i = 0; i < 3; ++i) persisted.push_back(original.Append(Step(i), false));
  EXPECT_EQ(persisted.back().sequence(), 4);

  EventLog restored;
  std::reverse(persisted.begin(), persisted.end());  // order does not matter
  restored.Restore(persisted, /*closed=*/false);
  const v1::JobEvent next = restored.Append(State(v1::RESTARTING), false);
  EXPECT_EQ(next.sequence(), 5);
  // A watcher that had seen up to sequence 2 continues with step 1.
  EventLog::Batch b = restored.Read(2, 0, absl::ZeroDuration());
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].step().step(), 1);
  EXPECT_TRUE(b.events[2].has_state_change());
  EXPECT_FALSE(b.closed);

  EventLog ended;
  ended.Restore({State(v1::SUCCEEDED)}, /*closed=*/true);
  EXPECT_EQ(ended.Append(Step(0), false).sequence(), 0);  // closed: nothing appended
}

}  // namespace
}  // namespace tessera

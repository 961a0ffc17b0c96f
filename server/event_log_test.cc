// Event log replay from a step, waiting for new events, and closing.
#include "server/event_log.h"

#include <thread>

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

}  // namespace
}  // namespace tessera

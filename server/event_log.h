// The history of one job's events (state changes, per-step metrics, worker
// errors) with monotonic sequence numbers. WatchJob streams read it: a late
// subscriber replays what it missed (step metrics from a chosen step on,
// everything else in full), then waits for new events. The log closes after
// the job's terminal state event. Thread-safe.
//
// Readers either wait in Read (a thread per reader) or subscribe for a
// wake-up after every Append and read without waiting, as the WatchJob
// reactor does so that watchers hold no thread while idle.
//
// Step metrics are kept for the most recent `max_step_events` steps only
// (default 100,000), so a job's memory does not grow with its step count;
// a subscriber that falls further behind misses the oldest step records,
// never a state change or worker error.
#ifndef TESSERA_SERVER_EVENT_LOG_H_
#define TESSERA_SERVER_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

inline constexpr int64_t kDefaultMaxStepEvents = 100'000;

// The events kept and replayed as step records: step metrics, and the FP8
// statistics record of a statistics step (large, one per interval), so
// neither grows a job's memory with its step count. RecordStep: the step
// such an event is about.
inline bool IsStepRecord(const v1::JobEvent& event) {
  return event.has_step() || event.has_numerics();
}
inline int RecordStep(const v1::JobEvent& event) {
  return event.has_step() ? event.step().step() : event.numerics().step();
}

class EventLog {
 public:
  explicit EventLog(int64_t max_step_events = kDefaultMaxStepEvents)
      : max_step_events_(max_step_events) {}

  // Stamps the sequence number and time, then appends. A state change to a
  // terminal state closes the log. Returns the stamped event (sequence 0 if
  // the log was closed and nothing was appended), for the job store.
  v1::JobEvent Append(v1::JobEvent event, bool closes);
  // Before any Append: the events of a job persisted by an earlier
  // coordinator, with their own sequence numbers and times, so that watchers
  // re-subscribing after a coordinator restart (after_sequence) continue
  // where they were. `closed`: the job had ended.
  void Restore(std::vector<v1::JobEvent> events, bool closed);

  struct Batch {
    std::vector<v1::JobEvent> events;
    int64_t next_cursor = 0;  // pass back as `cursor` on the next call
    bool closed = false;      // no event will follow these
  };
  // Events after `cursor` (0: from the start) in sequence order, skipping
  // step metrics before from_step. Waits up to `wait` for at least one if
  // none is there yet.
  Batch Read(int64_t cursor, int from_step, absl::Duration wait);

  // Calls `wake` after every Append, on the appending thread with no lock
  // of this log held. Returns an id for Unsubscribe. A call already under
  // way when Unsubscribe returns may still finish, so `wake` must only
  // touch state that outlives the subscription.
  int64_t Subscribe(std::function<void()> wake);
  void Unsubscribe(int64_t id);

 private:
  const int64_t max_step_events_;
  absl::Mutex mu_;
  int64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::JobEvent> other_events_ ABSL_GUARDED_BY(mu_);  // state changes, worker errors
  std::deque<v1::JobEvent> step_events_ ABSL_GUARDED_BY(mu_);    // the most recent steps
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_subscription_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::function<void()>> subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_EVENT_LOG_H_

// The history of one job's events (state changes, per-step metrics, worker
// errors) with monotonic sequence numbers. WatchJob streams read it: a late
// subscriber replays what it missed (step metrics from a chosen step on,
// everything else in full), then waits for new events. The log closes after
// the job's terminal state event. Thread-safe.
#ifndef TESSERA_SERVER_EVENT_LOG_H_
#define TESSERA_SERVER_EVENT_LOG_H_

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

class EventLog {
 public:
  // Stamps the sequence number and time, then appends. A state change to a
  // terminal state closes the log.
  void Append(v1::JobEvent event, bool closes);

  struct Batch {
    std::vector<v1::JobEvent> events;
    int64_t next_cursor = 0;  // pass back as `cursor` on the next call
    bool closed = false;      // no event will follow these
  };
  // Events at positions >= cursor, skipping step metrics before from_step.
  // Waits up to `wait` for at least one if none is there yet.
  Batch Read(int64_t cursor, int from_step, absl::Duration wait);

 private:
  absl::Mutex mu_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_EVENT_LOG_H_

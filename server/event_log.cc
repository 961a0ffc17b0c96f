// Per-job event history with replay and waiting (see event_log.h).
#include "server/event_log.h"

#include "absl/time/clock.h"

namespace tessera {

void EventLog::Append(v1::JobEvent event, bool closes) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  event.set_sequence(static_cast<int64_t>(events_.size()) + 1);
  event.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  events_.push_back(std::move(event));
  if (closes) closed_ = true;
}

EventLog::Batch EventLog::Read(int64_t cursor, int from_step, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  auto has_news = [this, cursor]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(events_.size()) > cursor || closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), wait);
  Batch batch;
  for (int64_t i = cursor; i < static_cast<int64_t>(events_.size()); ++i) {
    const v1::JobEvent& e = events_[i];
    if (e.has_step() && e.step().step() < from_step) continue;
    batch.events.push_back(e);
  }
  batch.next_cursor = static_cast<int64_t>(events_.size());
  batch.closed = closed_;
  return batch;
}

}  // namespace tessera

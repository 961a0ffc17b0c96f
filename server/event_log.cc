// Per-job event history with replay and waiting (see event_log.h).
//
// The cursor is the sequence number of the last event a reader was given.
// Both containers are ordered by sequence, so a read merges their tails.
#include "server/event_log.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace tessera {
namespace {

template <typename Events>
typename Events::const_iterator After(const Events& events, int64_t cursor) {
  return std::upper_bound(events.begin(), events.end(), cursor,
                          [](int64_t c, const v1::JobEvent& e) { return c < e.sequence(); });
}

}  // namespace

void EventLog::Append(v1::JobEvent event, bool closes) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  event.set_sequence(++last_sequence_);
  event.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  if (event.has_step()) {
    step_events_.push_back(std::move(event));
    while (static_cast<int64_t>(step_events_.size()) > max_step_events_) step_events_.pop_front();
  } else {
    other_events_.push_back(std::move(event));
  }
  if (closes) closed_ = true;
}

EventLog::Batch EventLog::Read(int64_t cursor, int from_step, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  auto has_news = [this, cursor]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return last_sequence_ > cursor || closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), wait);
  Batch batch;
  auto other = After(other_events_, cursor);
  auto step = After(step_events_, cursor);
  while (other != other_events_.end() || step != step_events_.end()) {
    const bool take_step = other == other_events_.end() ||
                           (step != step_events_.end() && step->sequence() < other->sequence());
    if (!take_step) {
      batch.events.push_back(*other++);
      continue;
    }
    if (step->step().step() >= from_step) batch.events.push_back(*step);
    ++step;
  }
  batch.next_cursor = std::max(cursor, last_sequence_);
  batch.closed = closed_;
  return batch;
}

}  // namespace tessera

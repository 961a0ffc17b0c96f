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

v1::JobEvent EventLog::Append(v1::JobEvent event, bool closes) {
  v1::JobEvent stamped;
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return v1::JobEvent();
    event.set_sequence(++last_sequence_);
    event.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
    stamped = event;
    if (IsStepRecord(event)) {
      step_events_.push_back(std::move(event));
      while (static_cast<int64_t>(step_events_.size()) > max_step_events_) {
        step_events_.pop_front();
      }
    } else {
      other_events_.push_back(std::move(event));
    }
    if (closes) closed_ = true;
    wakes.reserve(subscribers_.size());
    for (const auto& [id, wake] : subscribers_) wakes.push_back(wake);
  }
  for (const std::function<void()>& wake : wakes) wake();
  return stamped;
}

int64_t EventLog::Subscribe(std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  const int64_t id = ++next_subscription_;
  subscribers_.emplace(id, std::move(wake));
  return id;
}

void EventLog::Unsubscribe(int64_t id) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(id);
}

void EventLog::Restore(std::vector<v1::JobEvent> events, bool closed) {
  std::sort(events.begin(), events.end(), [](const v1::JobEvent& a, const v1::JobEvent& b) {
    return a.sequence() < b.sequence();
  });
  absl::MutexLock lock(&mu_);
  for (v1::JobEvent& event : events) {
    if (event.sequence() <= last_sequence_) continue;  // a duplicate
    last_sequence_ = event.sequence();
    if (IsStepRecord(event)) {
      step_events_.push_back(std::move(event));
      while (static_cast<int64_t>(step_events_.size()) > max_step_events_) step_events_.pop_front();
    } else {
      other_events_.push_back(std::move(event));
    }
  }
  closed_ = closed_ || closed;
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
    if (RecordStep(*step) >= from_step) batch.events.push_back(*step);
    ++step;
  }
  batch.next_cursor = std::max(cursor, last_sequence_);
  batch.closed = closed_;
  return batch;
}

}  // namespace tessera

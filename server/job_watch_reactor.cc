// See job_watch_reactor.h.
#include "server/job_watch_reactor.h"

#include <utility>

namespace tessera {
namespace {

class RefusedWatch final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  explicit RefusedWatch(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::JobEvent>* JobWatchReactor::Refuse(grpc::Status status) {
  return new RefusedWatch(std::move(status));
}

JobWatchReactor* JobWatchReactor::Start(std::shared_ptr<EventLog> log, int64_t cursor,
                                        int from_step, std::function<void()> on_done) {
  auto* reactor = new JobWatchReactor(std::move(log), cursor, from_step, std::move(on_done));
  {
    absl::MutexLock lock(&reactor->shared_->mu);
    reactor->shared_->reactor = reactor;
  }
  // Subscribe before the first read: an event appended between the two
  // then wakes a Pump that finds it.
  std::shared_ptr<Shared> shared = reactor->shared_;
  reactor->subscription_ = reactor->log_->Subscribe([shared] {
    JobWatchReactor* r;
    Action action;
    {
      absl::MutexLock lock(&shared->mu);
      r = shared->reactor;
      if (r == nullptr) return;  // the call is over
      action = r->DecideLocked();
    }
    // With nothing to do, r may already be gone (Finish was called and
    // OnDone ran): only an action makes `r` safe to touch (see Carry).
    if (action.write != nullptr || action.finish) r->Carry(action);
  });
  reactor->Pump();
  return reactor;
}

JobWatchReactor::JobWatchReactor(std::shared_ptr<EventLog> log, int64_t cursor, int from_step,
                                 std::function<void()> on_done)
    : shared_(std::make_shared<Shared>()),
      log_(std::move(log)),
      from_step_(from_step),
      on_done_(std::move(on_done)),
      cursor_(cursor) {}

JobWatchReactor::Action JobWatchReactor::DecideLocked() {
  Action action;
  if (writing_ || finishing_) return action;  // OnWriteDone pumps again
  if (cancelled_) {
    finishing_ = true;
    action.finish = true;
    action.status = grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
    return action;
  }
  if (pending_.empty() && !log_closed_) {
    EventLog::Batch batch = log_->Read(cursor_, from_step_, absl::ZeroDuration());
    for (v1::JobEvent& event : batch.events) pending_.push_back(std::move(event));
    cursor_ = batch.next_cursor;
    log_closed_ = batch.closed;
  }
  if (!pending_.empty()) {
    writing_ = true;
    action.write = &pending_.front();  // deque: stable while the write is in flight
  } else if (log_closed_) {
    finishing_ = true;
    action.finish = true;
    action.status = grpc::Status::OK;
  }
  return action;
}

// Safe after the lock is released: gRPC calls OnDone only after Finish, and
// Finish is only decided when no write is in flight, so `this` is alive for
// a StartWrite; after Finish nothing here touches `this`.
void JobWatchReactor::Carry(const Action& action) {
  if (action.write != nullptr) {
    StartWrite(action.write);
  } else if (action.finish) {
    Finish(action.status);
  }
}

void JobWatchReactor::Pump() {
  Action action;
  {
    absl::MutexLock lock(&shared_->mu);
    action = DecideLocked();
  }
  Carry(action);
}

void JobWatchReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&shared_->mu);
    writing_ = false;
    pending_.pop_front();
    if (!ok) cancelled_ = true;  // the stream broke: the client is gone
  }
  Pump();
}

void JobWatchReactor::OnCancel() {
  {
    absl::MutexLock lock(&shared_->mu);
    cancelled_ = true;
  }
  Pump();
}

void JobWatchReactor::OnDone() {
  {
    absl::MutexLock lock(&shared_->mu);
    shared_->reactor = nullptr;
  }
  log_->Unsubscribe(subscription_);
  if (on_done_) on_done_();
  delete this;
}

}  // namespace tessera

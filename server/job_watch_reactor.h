// WatchJob on gRPC's callback API: a watcher holds no server thread while it
// waits for events. With the synchronous API each open stream kept one
// thread blocked in EventLog::Read, so a thousand `tessera watch` sessions
// meant a thousand threads competing with the heartbeats and step reports
// that decide whether a job lives.
//
// A JobWatchReactor replays the job's events after its cursor, then sleeps
// until EventLog wakes it on the next Append (on the appending thread). It
// sends one event at a time (gRPC allows one write in flight), finishes
// with OK once the log has closed and everything is sent, and with
// CANCELLED when the client goes away. It deletes itself when gRPC is done
// with it.
//
// Locking: every decision (read the log, start a write, finish) is taken
// under the reactor's mutex and carried out after releasing it, so no gRPC
// call is made with a lock held. The mutex lives in a block shared with the
// log's wake callback, which may outlive the reactor by one call.
#ifndef TESSERA_SERVER_JOB_WATCH_REACTOR_H_
#define TESSERA_SERVER_JOB_WATCH_REACTOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "server/event_log.h"

namespace tessera {

class JobWatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  // Streams `log` from after `cursor`, skipping step metrics before
  // `from_step`. `on_done` runs once, when gRPC has finished with the call.
  static JobWatchReactor* Start(std::shared_ptr<EventLog> log, int64_t cursor, int from_step,
                                std::function<void()> on_done);

  // A reactor that only finishes the call with `status` (a refused watch).
  static grpc::ServerWriteReactor<v1::JobEvent>* Refuse(grpc::Status status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Shared {
    absl::Mutex mu;
    JobWatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;  // null once done
  };
  // What to do after the lock is released.
  struct Action {
    const v1::JobEvent* write = nullptr;
    bool finish = false;
    grpc::Status status;
  };

  JobWatchReactor(std::shared_ptr<EventLog> log, int64_t cursor, int from_step,
                  std::function<void()> on_done);
  // Called by every reaction and wake-up.
  void Pump();
  Action DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu);
  void Carry(const Action& action);

  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<EventLog> log_;
  const int from_step_;
  const std::function<void()> on_done_;
  int64_t subscription_ = 0;
  int64_t cursor_ ABSL_GUARDED_BY(shared_->mu);
  std::deque<v1::JobEvent> pending_ ABSL_GUARDED_BY(shared_->mu);  // front: in flight
  bool log_closed_ ABSL_GUARDED_BY(shared_->mu) = false;
  bool writing_ ABSL_GUARDED_BY(shared_->mu) = false;
  bool cancelled_ ABSL_GUARDED_BY(shared_->mu) = false;
  bool finishing_ ABSL_GUARDED_BY(shared_->mu) = false;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_WATCH_REACTOR_H_

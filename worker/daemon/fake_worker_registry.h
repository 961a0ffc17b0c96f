// A test-only WorkerRegistry: the coordinator's registration and heartbeat
// RPCs, reduced to a set of known worker ids and a record of what arrived.
// Forget() drops every id, as a restarted coordinator would, so the next
// heartbeat answers NOT_FOUND. set_abort_job_ids() makes every answer tell
// the worker to abort those jobs, as reconciliation does. A heartbeat with
// `stopping` gets the answer set_stopping_answer() gave (default: nothing
// to suspend).
#ifndef TESSERA_WORKER_DAEMON_FAKE_WORKER_REGISTRY_H_
#define TESSERA_WORKER_DAEMON_FAKE_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/worker.grpc.pb.h"

namespace tessera {

class FakeWorkerRegistry final : public v1::WorkerRegistry::Service {
 public:
  explicit FakeWorkerRegistry(int heartbeat_interval_ms) : interval_ms_(heartbeat_interval_ms) {}

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

  struct Record {
    int registrations = 0;
    v1::RegisterWorkerRequest last_registration;
    std::string last_id;  // handed out by the latest registration
    int heartbeats = 0;   // accepted ones
    int stopping_heartbeats = 0;  // accepted ones with `stopping`
    int rejected_heartbeats = 0;
    v1::HeartbeatRequest last_heartbeat;
  };
  Record record();
  void Forget();
  void set_abort_job_ids(std::vector<std::string> ids);
  void set_stopping_answer(bool suspending, std::string not_suspended_reason);
  // Waits until `done(record)` holds; false after `timeout`.
  bool WaitFor(const std::function<bool(const Record&)>& done, absl::Duration timeout);

 private:
  const int interval_ms_;
  absl::Mutex mu_;
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  Record record_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> abort_job_ids_ ABSL_GUARDED_BY(mu_);
  bool suspending_ ABSL_GUARDED_BY(mu_) = false;
  std::string not_suspended_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_FAKE_WORKER_REGISTRY_H_

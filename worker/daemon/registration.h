// Keeps a worker registered with the coordinator: registers (retrying with
// backoff while the coordinator is unreachable), then heartbeats at the
// interval the coordinator asked for, carrying the worker's health. A
// heartbeat answered NOT_FOUND (the coordinator restarted or swept us)
// registers again. Runs on its own thread; Stop() ends it promptly, even
// mid-RPC.
//
// Registration and every heartbeat also carry what the worker holds (its
// job, phase and steps done). When the coordinator answers that the worker
// holds a job it should not (ended, unknown after a coordinator restart, or
// moved to other workers), the loop hands the job id to `on_abort`, which
// must not block: heartbeats have to keep flowing while the job is torn
// down (see orphan_aborter.h).
//
// A worker that is shutting down says so (AnnounceStopping): one heartbeat
// at once, and every later one, carries `stopping` and reports the worker
// unhealthy ("shutting down") so no new job is placed on it; the answer
// says whether the coordinator is suspending the worker's job.
#ifndef TESSERA_WORKER_DAEMON_REGISTRATION_H_
#define TESSERA_WORKER_DAEMON_REGISTRATION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/worker.grpc.pb.h"

namespace tessera {

class Registration {
 public:
  struct Health {
    bool healthy = true;
    std::string reason;
    v1::WorkerActivity activity;  // empty: idle
  };
  // `health` is asked before every heartbeat. `on_registered` runs on the
  // loop's thread after every successful registration, with the new id.
  // `credentials` (null: plaintext, no token) are presented on every call;
  // the session the coordinator issues at registration is stored in them,
  // so the rendezvous calls made with the same object carry it too.
  Registration(const std::string& coordinator_address, v1::RegisterWorkerRequest request,
               std::function<Health()> health,
               std::function<void(const std::string& worker_id)> on_registered,
               std::shared_ptr<ClientCredentials> credentials = nullptr);
  ~Registration();  // Stop()s

  // Set before Start(): called with each job the coordinator says to abort.
  void set_on_abort(std::function<void(const std::string& job_id)> on_abort) {
    on_abort_ = std::move(on_abort);
  }
  void Start();
  // Ends the loop and joins it. Idempotent; no heartbeat is sent after it.
  void Stop();
  // Empty until registered.
  std::string worker_id();
  // Sends a heartbeat with `stopping` now, from the calling thread, and
  // returns the coordinator's answer; later heartbeats carry it too.
  // FAILED_PRECONDITION before the worker has registered; the call's error
  // (e.g. UNAVAILABLE) if the coordinator does not answer.
  absl::StatusOr<v1::HeartbeatResponse> AnnounceStopping();

 private:
  void Loop();
  // What the next heartbeat of worker `id` says.
  v1::HeartbeatRequest HeartbeatRequestFor(const std::string& id);
  // One unary call that Stop() can cancel; false if stopping.
  bool BeginCall(grpc::ClientContext* context);
  void EndCall();

  std::shared_ptr<ClientCredentials> credentials_;
  std::unique_ptr<v1::WorkerRegistry::Stub> stub_;
  std::string coordinator_address_;
  v1::RegisterWorkerRequest request_;
  std::function<Health()> health_;
  std::function<void(const std::string&)> on_registered_;
  std::function<void(const std::string&)> on_abort_;
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* call_in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Stop() was called
  bool stopping_announced_ ABSL_GUARDED_BY(mu_) = false;  // AnnounceStopping()
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_REGISTRATION_H_

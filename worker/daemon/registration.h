// Keeps a worker registered with the coordinator: registers (retrying with
// backoff while the coordinator is unreachable), then heartbeats at the
// interval the coordinator asked for, carrying the worker's health. A
// heartbeat answered NOT_FOUND (the coordinator restarted or swept us)
// registers again. Runs on its own thread; Stop() ends it promptly, even
// mid-RPC.
#ifndef TESSERA_WORKER_DAEMON_REGISTRATION_H_
#define TESSERA_WORKER_DAEMON_REGISTRATION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/worker.grpc.pb.h"

namespace tessera {

class Registration {
 public:
  struct Health {
    bool healthy = true;
    std::string reason;
  };
  // `health` is asked before every heartbeat. `on_registered` runs on the
  // loop's thread after every successful registration, with the new id.
  Registration(const std::string& coordinator_address, v1::RegisterWorkerRequest request,
               std::function<Health()> health,
               std::function<void(const std::string& worker_id)> on_registered);
  ~Registration();  // Stop()s

  void Start();
  // Ends the loop and joins it. Idempotent; no heartbeat is sent after it.
  void Stop();
  // Empty until registered.
  std::string worker_id();

 private:
  void Loop();
  // One unary call that Stop() can cancel; false if stopping.
  bool BeginCall(grpc::ClientContext* context);
  void EndCall();

  std::unique_ptr<v1::WorkerRegistry::Stub> stub_;
  std::string coordinator_address_;
  v1::RegisterWorkerRequest request_;
  std::function<Health()> health_;
  std::function<void(const std::string&)> on_registered_;
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* call_in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_REGISTRATION_H_

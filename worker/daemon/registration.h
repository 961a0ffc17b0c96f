// Keeps a worker registered with the coordinator: registers (retrying with
// backoff while the coordinator is unreachable), then heartbeats at the
// interval the coordinator asked for, carrying the worker's health. A
// heartbeat answered NOT_FOUND (the coordinator restarted or swept us)
// registers again.
#ifndef TESSERA_WORKER_DAEMON_REGISTRATION_H_
#define TESSERA_WORKER_DAEMON_REGISTRATION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/tessera/v1/worker.grpc.pb.h"

namespace tessera {

class Registration {
 public:
  struct Health {
    bool healthy = true;
    std::string reason;
  };
  // `on_registered` runs after every successful registration with the id.
  Registration(const std::string& coordinator_address, v1::RegisterWorkerRequest request,
               std::function<Health()> health,
               std::function<void(const std::string& worker_id)> on_registered);
  ~Registration();  // stops the loop

  void Start();
  std::string worker_id();

 private:
  void Loop();

  std::unique_ptr<v1::WorkerRegistry::Stub> stub_;
  std::string coordinator_address_;
  v1::RegisterWorkerRequest request_;
  std::function<Health()> health_;
  std::function<void(const std::string&)> on_registered_;
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_REGISTRATION_H_

// One long-lived thread that runs every compute call of a worker. The CUDA
// engine sets its device once per thread and keeps per-thread state, so all
// Trainer calls (creation, setup, steps, checkpoint, destruction) must happen
// on the same thread, whichever gRPC handler thread asked for them.
#ifndef TESSERA_WORKER_DAEMON_COMPUTE_THREAD_H_
#define TESSERA_WORKER_DAEMON_COMPUTE_THREAD_H_

#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace tessera {

class ComputeThread {
 public:
  ComputeThread();
  ~ComputeThread();  // finishes the task in flight, then joins

  // Runs `task` on the compute thread and waits for it. Calls from several
  // threads are served one at a time, in arrival order.
  void Run(const std::function<void()>& task);
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void Loop();

  absl::Mutex submit_mu_;  // one caller at a time
  absl::Mutex mu_;
  const std::function<void()>* task_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_COMPUTE_THREAD_H_

// Aborts, off the heartbeat thread, the jobs the coordinator says this
// worker should no longer hold (a job that ended while this worker was
// stopped or cut off, or that a restarted coordinator never heard of).
// WorkerCore::Abort waits for the command in flight to return, which for a
// rank blocked in a collective can take up to the collective timeout; the
// heartbeats that keep the worker registered must not wait with it. So
// Request() only queues the job and one thread of its own aborts the queued
// jobs in turn. The coordinator repeats its request on every heartbeat until
// the worker reports the job gone, so a job already queued or being aborted
// is not queued again.
#ifndef TESSERA_WORKER_DAEMON_ORPHAN_ABORTER_H_
#define TESSERA_WORKER_DAEMON_ORPHAN_ABORTER_H_

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace tessera {

class OrphanAborter {
 public:
  // `abort(job_id)` tears the job down (WorkerCore::Abort); it may block.
  explicit OrphanAborter(std::function<void(const std::string& job_id)> abort);
  // Lets the abort in progress finish; drops the ones still queued.
  ~OrphanAborter();

  // Never blocks. Thread-safe.
  void Request(const std::string& job_id);

 private:
  void Loop();

  std::function<void(const std::string&)> abort_;
  absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);  // queued or being aborted
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_ORPHAN_ABORTER_H_

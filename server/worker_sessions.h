// Per-worker sessions: a random secret the coordinator hands each worker
// when it registers. The worker credential is shared by every worker, so on
// its own it cannot tell workers apart; the session can. A heartbeat must
// carry the session of the worker it speaks for (no worker can mark another
// unhealthy), and a rendezvous call the session of a worker that holds a
// rank of the job (no one else can read or write that job's NCCL id or Gloo
// peer addresses). No gRPC types; thread-safe.
#ifndef TESSERA_SERVER_WORKER_SESSIONS_H_
#define TESSERA_SERVER_WORKER_SESSIONS_H_

#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

class WorkerSessions {
 public:
  // Sessions kept; the oldest are forgotten beyond this (their workers were
  // swept long ago or registered again).
  static constexpr size_t kMaxSessions = 100000;

  // A fresh session for a newly registered worker.
  std::string Issue(const std::string& worker_id);

  // NOT_FOUND for an unknown session (the coordinator restarted: the worker
  // registers again); PERMISSION_DENIED if it belongs to another worker.
  absl::Status CheckHeartbeat(const std::string& session, const std::string& worker_id);

  // PERMISSION_DENIED unless the session's worker holds a rank of `job_id`;
  // `job_of(worker_id)` gives the job that holds a worker (empty if none).
  absl::Status CheckRank(const std::string& session, const std::string& job_id,
                         const std::function<std::string(const std::string&)>& job_of);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> worker_by_session_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_SESSIONS_H_

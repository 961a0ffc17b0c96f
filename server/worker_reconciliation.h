// Reconciles what the coordinator believes a worker is doing with what the
// worker itself reports (WorkerActivity, carried by registration and every
// heartbeat). The two drift apart whenever an Abort does not reach a worker:
// it was stopped (SIGSTOP) or partitioned while its job failed, its Abort
// timed out while a collective was still waiting on a dead peer, or the
// coordinator restarted and forgot the job. Left alone, such a worker looks
// free to the scheduler while it still holds the old job, and every job
// placed on it fails as "busy".
//
// The rule: a worker that reports a job other than the one the coordinator
// assigned it (a job that ended, is unknown, or now runs on other workers)
// is told to abort that job, and is not free until it reports no job at
// all. A worker reporting its assigned job, or nothing, is consistent.
#ifndef TESSERA_SERVER_WORKER_RECONCILIATION_H_
#define TESSERA_SERVER_WORKER_RECONCILIATION_H_

#include <string>

namespace tessera {

struct Reconciliation {
  // Non-empty: the worker must abort this job.
  std::string abort_job_id;
  // Whether the worker may be given a new job (if it is also healthy).
  bool free = false;
};

// `assigned_job`: the coordinator's view (empty: none); `reported_job`: the
// worker's own (empty: idle).
Reconciliation Reconcile(const std::string& assigned_job, const std::string& reported_job);

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_RECONCILIATION_H_

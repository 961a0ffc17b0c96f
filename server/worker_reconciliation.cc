// The worker reconciliation rule (see worker_reconciliation.h).
#include "server/worker_reconciliation.h"

namespace tessera {

Reconciliation Reconcile(const std::string& assigned_job, const std::string& reported_job) {
  Reconciliation r;
  if (reported_job.empty()) {
    r.free = assigned_job.empty();
    return r;
  }
  if (reported_job != assigned_job) r.abort_job_id = reported_job;
  return r;  // busy either way: with its own job, or until the orphan is gone
}

}  // namespace tessera

// The coordinator's side of quotas (see coordinator.h): what each user's
// jobs hold, counted for every scheduling round, and replacing the quotas
// when the quota file is reloaded.
#include "server/coordinator.h"

namespace tessera {

void Coordinator::SetQuotas(WorkerQuotas quotas) {
  absl::MutexLock lock(&mu_);
  quotas_ = std::move(quotas);
  RefreshPendingLocked();
}

QuotaLedger Coordinator::QuotaLedgerLocked() {
  QuotaLedger ledger(quotas_);
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry->job;
    // An attempt holds its workers from placement until FinishAttemptLocked
    // releases them, whatever state it has recorded meanwhile.
    if (entry->runner != nullptr || job.state() == v1::STARTING || job.state() == v1::RUNNING) {
      ledger.Hold(job.owner(), job.spec().world_size());
    } else if (job.state() == v1::PENDING || job.state() == v1::RESTARTING) {
      ledger.SetOwner(id, job.owner());
    }
  }
  return ledger;
}

}  // namespace tessera

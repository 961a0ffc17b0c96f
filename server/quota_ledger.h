// The quota rule for one scheduling round: may a queued job start without
// taking its owner over their quota (worker_quotas.h)?
//
// A user's workers are those held by their jobs with an attempt in flight
// (STARTING, RUNNING, and one being cancelled or suspended until its
// workers are released); the coordinator counts them (Hold) before the
// round, and the round adds each job it places (Take), so two jobs of one
// user placed in the same round cannot pass the quota together. A job
// starts only if the workers its owner holds plus its world_size stay
// within the quota.
//
// A job over quota waits, with a reason naming the quota; it never holds
// its device kind against other jobs (scheduler.h), so other users' jobs,
// and the owner's smaller ones that fit the quota, start past it. That is
// backfill, and the starvation bound applies to it as to workers: a job
// over quota that has waited past the bound reserves its owner's quota
// (Reserve), and the owner's later jobs wait until it has started. A job
// whose world_size alone exceeds the quota reserves nothing. A job
// whose world_size alone exceeds the quota waits too, rather than being
// refused at submit: the quota file is reloaded on SIGHUP, and the job
// starts once the quota is raised (or is cancelled by its owner). A
// lowered quota stops nothing that runs: it applies to the next start.
//
// No gRPC types, no clock, no registry: a value the coordinator builds and
// the scheduler consults, tested alone.
#ifndef TESSERA_SERVER_QUOTA_LEDGER_H_
#define TESSERA_SERVER_QUOTA_LEDGER_H_

#include <map>
#include <string>

#include "server/worker_quotas.h"

namespace tessera {

class QuotaLedger {
 public:
  // No limits: every job is within quota.
  QuotaLedger() = default;
  explicit QuotaLedger(WorkerQuotas quotas) : quotas_(std::move(quotas)) {}

  // `owner`'s jobs already hold `workers` more workers.
  void Hold(const std::string& owner, int workers);
  // The queued job `job_id` belongs to `owner` (empty: no owner, no quota).
  void SetOwner(const std::string& job_id, const std::string& owner);

  // Empty if `job_id` may start `world_size` workers now; otherwise why it
  // waits ("waiting for quota: user alice may hold 2 workers, holds 2, this
  // job needs 2").
  std::string Blocked(const std::string& job_id, int world_size) const;
  // The job was placed: its owner holds `world_size` more.
  void Take(const std::string& job_id, int world_size);
  // The job, over quota, has waited past the starvation bound: its owner's
  // later jobs are Blocked behind it for the rest of the round. No-op if
  // the owner has no limit, if the quota could never hold the job, or if an
  // earlier job reserved the quota already.
  void Reserve(const std::string& job_id, int world_size);

  // Workers `owner` holds (Hold and Take so far).
  int Held(const std::string& owner) const;

 private:
  const std::string& OwnerOf(const std::string& job_id) const;

  WorkerQuotas quotas_;
  std::map<std::string, int> held_;                  // owner -> workers
  std::map<std::string, std::string> owner_of_job_;  // queued job -> owner
  std::map<std::string, std::string> reserved_by_;   // owner -> the job reserving
};

}  // namespace tessera

#endif  // TESSERA_SERVER_QUOTA_LEDGER_H_

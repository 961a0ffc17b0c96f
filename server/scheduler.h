// Gang scheduling with backfill. Jobs wait in a FIFO queue. Each scheduling
// round walks the queue in order and starts every job for which
// `world_size` healthy, free workers of its device kind exist, giving it all
// of them at once. A job that does not fit is skipped, so the jobs behind it
// that fit start now (backfill) instead of waiting behind a job that cannot
// run yet, or cannot run at all because it asks for more workers of its
// kind than are registered. Such a job keeps waiting, since workers may
// still join, and its reason says what it waits for.
//
// Starvation: with backfill alone, small jobs could keep taking the workers
// a large job waits for. A job that the registered healthy workers could run
// and that has waited longer than `starvation_timeout` therefore holds its
// device kind: no job behind it of that kind starts before it does, so
// workers accumulate for it as they free up. Only the oldest such job of a
// kind holds it; other kinds are unaffected. A timeout of zero makes the
// queue strictly FIFO among jobs that can run, while jobs that never can
// are still passed over.
//
// Quotas (quota_ledger.h): a job whose start would take its owner over
// their quota of workers is passed over first, with the quota as its
// reason, before any of the rules above: it never holds its device kind,
// so the jobs behind it start as if it were not queued. Backfill past it
// is bounded the same way, per owner: once it has waited past
// `starvation_timeout` (a restarting job at once), its owner's later jobs
// wait until it has started.
//
// Restarts: a job that lost an attempt (RESTARTING) is queued ahead of every
// job that has not started yet, behind earlier restarting jobs only, and
// holds its device kind at once if the registered healthy workers could run
// it, so the workers freed by its own failure, and any replacement that
// joins, go to it first.
#ifndef TESSERA_SERVER_SCHEDULER_H_
#define TESSERA_SERVER_SCHEDULER_H_

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/tessera/v1/job.pb.h"
#include "server/quota_ledger.h"
#include "server/worker_registry.h"

namespace tessera {

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // rank order
};

class Scheduler {
 public:
  explicit Scheduler(absl::Duration starvation_timeout = absl::Minutes(5))
      : starvation_timeout_(starvation_timeout) {}

  // Queues a job (its world_size and device_kind come from `spec`).
  void Enqueue(const std::string& job_id, const v1::JobSpec& spec, absl::Time now);
  // Queues a restarting job ahead of the jobs that have not started.
  void EnqueueRestart(const std::string& job_id, const v1::JobSpec& spec, absl::Time now);
  // Removes a job (cancelled while pending). No-op if absent.
  void Remove(const std::string& job_id);
  bool Contains(const std::string& job_id) const;
  // 1-based position in submission order, 0 if not queued.
  int Position(const std::string& job_id) const;
  bool empty() const { return queue_.empty(); }

  // One scheduling round: the jobs to start now, in queue order, each with
  // its gang. They leave the queue; marking the workers assigned is the
  // caller's job. `quotas` holds what each owner holds now and the owner of
  // each queued job (default: no limits).
  std::vector<Placement> Schedule(const WorkerRegistry& registry, absl::Time now,
                                  const QuotaLedger& quotas = QuotaLedger());
  // Why each queued job is waiting, by job id, as of `now`.
  std::map<std::string, std::string> PendingReasons(
      const WorkerRegistry& registry, absl::Time now,
      const QuotaLedger& quotas = QuotaLedger()) const;

 private:
  struct Queued {
    std::string job_id;
    int world_size = 1;
    v1::DeviceKind kind = v1::CPU;
    absl::Time enqueued;
    bool restarting = false;
  };
  // What one round would do: placements, and a reason for every job left.
  struct Plan {
    std::vector<Placement> placements;
    std::map<std::string, std::string> reasons;
  };
  // `quotas` is a copy: the round adds the jobs it places.
  Plan MakePlan(const WorkerRegistry& registry, absl::Time now, QuotaLedger quotas) const;

  absl::Duration starvation_timeout_;
  std::deque<Queued> queue_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_SCHEDULER_H_

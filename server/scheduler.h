// Gang scheduling with priorities, backfill and preemption. Jobs wait in a
// queue ordered by priority (JobSpec.priority, higher first; common/
// job_priority.h), then by submission. Each scheduling round walks the
// queue in order and starts every job for which `world_size` healthy, free
// workers of its device kind exist, giving it all of them at once. A job
// that does not fit is skipped, so the jobs behind it that fit start now
// (backfill) instead of waiting behind a job that cannot run yet, or cannot
// run at all because it asks for more workers of its kind than are
// registered. Such a job keeps waiting, since workers may still join, and
// its reason says what it waits for. Backfill may start a lower-priority
// job before a higher-priority one that does not fit yet; preemption and
// the starvation bound below are what keep the higher one from waiting on
// it for long.
//
// Preemption: a job that does not fit, although the registered healthy
// workers could run it, may preempt RUNNING jobs of its kind with strictly
// lower priority and a checkpoint.dir (victims chosen by preemption.h). The
// round reports the decision; the coordinator suspends the victims at
// their next step boundary and queues them again. Until it starts, the
// preempting job holds its device kind (as a starving job does, below), so
// the workers its victims release go to it and not to jobs behind it. Jobs
// already being suspended for it count as workers on their way: it chooses
// more victims only when those are not enough. A job preempted this way is
// queued again ahead of the jobs of its priority that have not started yet.
//
// Starvation: with backfill alone, small jobs could keep taking the workers
// a large job waits for. A job that the registered healthy workers could run
// and that has waited longer than `starvation_timeout` therefore holds its
// device kind: no job behind it of that kind starts before it does, so
// workers accumulate for it as they free up. Only the first such job of a
// kind in queue order holds it; other kinds are unaffected. A timeout of
// zero makes the queue strictly ordered among jobs that can run, while jobs
// that never can are still passed over. Since the queue is ordered by
// priority, "behind it" means lower priority, or equal priority and
// submitted later: a higher-priority job is never held up by a
// lower-priority one, and a low-priority job can wait for as long as
// higher-priority work keeps arriving.
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
// job of its priority that has not started yet, behind earlier restarting
// jobs only, and holds its device kind at once if the registered healthy
// workers could run it, so the workers freed by its own failure, and any
// replacement that joins, go to it first.
#ifndef TESSERA_SERVER_SCHEDULER_H_
#define TESSERA_SERVER_SCHEDULER_H_

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/job_priority.h"
#include "proto/tessera/v1/job.pb.h"
#include "server/quota_ledger.h"
#include "server/worker_registry.h"

namespace tessera {

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // rank order
};

// A job that holds workers, as the scheduler needs to know it: whom a
// pending job waits on, and whom it may preempt.
struct RunningJob {
  std::string job_id;
  v1::DeviceKind kind = v1::CPU;
  int priority = 0;
  int workers = 0;      // workers it holds
  absl::Time started;   // its current attempt's start
  // Empty when it may be preempted; otherwise why not ("has no
  // checkpoint.dir", "is still STARTING", ...).
  std::string not_preemptible;
  // Non-empty while it is being suspended for that pending job.
  std::string preempted_for;
};

// A round's decision that `job_id` preempts `victims`.
struct PreemptionDecision {
  std::string job_id;
  int priority = 0;
  std::vector<std::string> victims;
  std::string reason;  // preemption.h's VictimChoice::reason
};

// What the scheduler would do with a job submitted now (a dry run).
struct DryRunPlacement {
  enum class Outcome { kStartNow, kPreempt, kWait };
  Outcome outcome = Outcome::kWait;
  std::vector<std::string> worker_ids;  // kStartNow: rank order
  std::vector<std::string> victims;     // kPreempt
  std::string reason;                   // the reason the queued job would show
  int queue_position = 0;               // 1-based
};

class Scheduler {
 public:
  explicit Scheduler(absl::Duration starvation_timeout = absl::Minutes(5))
      : starvation_timeout_(starvation_timeout) {}

  // Queues a job (its world_size, device_kind and priority come from
  // `spec`) behind the jobs of its priority and above.
  void Enqueue(const std::string& job_id, const v1::JobSpec& spec, absl::Time now);
  // Queues a preempted job ahead of the jobs of its priority that have not
  // started, behind those that have (restarting or preempted).
  void EnqueuePreempted(const std::string& job_id, const v1::JobSpec& spec, absl::Time now);
  // Queues a restarting job ahead of the jobs of its priority that have not
  // started.
  void EnqueueRestart(const std::string& job_id, const v1::JobSpec& spec, absl::Time now);
  // Removes a job (cancelled while pending). No-op if absent.
  void Remove(const std::string& job_id);
  bool Contains(const std::string& job_id) const;
  // 1-based position in queue order, 0 if not queued.
  int Position(const std::string& job_id) const;
  bool empty() const { return queue_.empty(); }

  // One scheduling round: the jobs to start now, in queue order, each with
  // its gang. They leave the queue; marking the workers assigned is the
  // caller's job. `running`: the jobs holding workers; with `preemptions`,
  // the round's new preemption decisions (the caller suspends the victims
  // and reports them back as RunningJob.preempted_for). `quotas` holds what
  // each owner holds now and the owner of each queued job (default: no
  // limits).
  std::vector<Placement> Schedule(const WorkerRegistry& registry, absl::Time now,
                                  const std::vector<RunningJob>& running = {},
                                  std::vector<PreemptionDecision>* preemptions = nullptr,
                                  const QuotaLedger& quotas = QuotaLedger());
  // Why each queued job is waiting, by job id, as of `now`.
  std::map<std::string, std::string> PendingReasons(
      const WorkerRegistry& registry, absl::Time now,
      const std::vector<RunningJob>& running = {},
      const QuotaLedger& quotas = QuotaLedger()) const;
  // What a job with `spec` (defaults applied), submitted by `owner` (empty:
  // no quota applies), would get if it were queued now. Changes nothing.
  DryRunPlacement DryRun(const v1::JobSpec& spec, const WorkerRegistry& registry,
                         const std::vector<RunningJob>& running, absl::Time now,
                         QuotaLedger quotas = QuotaLedger(),
                         const std::string& owner = "") const;

 private:
  struct Queued {
    std::string job_id;
    int world_size = 1;
    v1::DeviceKind kind = v1::CPU;
    absl::Time enqueued;
    bool restarting = false;
    int priority = 0;
    bool preempted = false;  // queued again after being preempted
    bool started_before() const { return restarting || preempted; }
  };
  // Inserts in queue order: by priority, then jobs that started before
  // ahead of those that did not, then by arrival.
  void Insert(Queued q);
  // What one round would do: placements, preemptions, and a reason for
  // every job left.
  struct Plan {
    std::vector<Placement> placements;
    std::vector<PreemptionDecision> preemptions;
    std::map<std::string, std::string> reasons;
  };
  // `quotas` is a copy: the round adds the jobs it places.
  Plan MakePlan(const WorkerRegistry& registry, absl::Time now,
                const std::vector<RunningJob>& running, QuotaLedger quotas) const;

  absl::Duration starvation_timeout_;
  std::deque<Queued> queue_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_SCHEDULER_H_

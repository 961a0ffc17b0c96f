// Gang scheduling with priorities, backfill, preemption and a starvation
// bound (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/preemption.h"

namespace tessera {
namespace {

std::string KindName(v1::DeviceKind kind) {
  return absl::AsciiStrToUpper(v1::DeviceKind_Name(kind));
}

// The queue id a dry run's hypothetical job takes; never a real job id.
constexpr char kDryRunJobId[] = "(dry run)";

// "; busy with job-1 (priority 5, 2 workers), ..." for the jobs holding
// workers of `kind`, or "" when none do.
std::string BusyWith(const std::vector<RunningJob>& running, v1::DeviceKind kind) {
  std::vector<std::string> busy;
  for (const RunningJob& r : running) {
    if (r.kind != kind) continue;
    busy.push_back(absl::StrCat(r.job_id, " (priority ", r.priority, ", ", r.workers,
                                r.workers == 1 ? " worker)" : " workers)"));
  }
  if (busy.empty()) return "";
  return absl::StrCat("; busy with ", absl::StrJoin(busy, ", "));
}

}  // namespace

void Scheduler::Insert(Queued q) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [&q](const Queued& other) {
    if (other.priority != q.priority) return other.priority < q.priority;
    return q.started_before() && !other.started_before();
  });
  queue_.insert(it, std::move(q));
}

void Scheduler::Enqueue(const std::string& job_id, const v1::JobSpec& spec, absl::Time now) {
  Queued q{job_id, spec.world_size(), spec.device_kind(), now};
  q.priority = EffectiveJobPriority(spec);
  Insert(std::move(q));
}

void Scheduler::EnqueuePreempted(const std::string& job_id, const v1::JobSpec& spec,
                                 absl::Time now) {
  Queued q{job_id, spec.world_size(), spec.device_kind(), now};
  q.priority = EffectiveJobPriority(spec);
  q.preempted = true;
  Insert(std::move(q));
}

void Scheduler::EnqueueRestart(const std::string& job_id, const v1::JobSpec& spec,
                               absl::Time now) {
  Queued q{job_id, spec.world_size(), spec.device_kind(), now, /*restarting=*/true};
  q.priority = EffectiveJobPriority(spec);
  Insert(std::move(q));
}

void Scheduler::Remove(const std::string& job_id) {
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [&](const Queued& q) { return q.job_id == job_id; }),
               queue_.end());
}

bool Scheduler::Contains(const std::string& job_id) const { return Position(job_id) > 0; }

int Scheduler::Position(const std::string& job_id) const {
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].job_id == job_id) return static_cast<int>(i) + 1;
  }
  return 0;
}

Scheduler::Plan Scheduler::MakePlan(const WorkerRegistry& registry, absl::Time now,
                                    const std::vector<RunningJob>& running,
                                    QuotaLedger quotas) const {
  Plan plan;
  std::map<v1::DeviceKind, std::vector<std::string>> free;  // oldest registration first
  std::map<v1::DeviceKind, std::string> held_by;            // kind -> the job holding it
  // Running jobs already being suspended for a preemption, or chosen in this
  // round: no second preemptor may count on them.
  std::set<std::string> claimed;
  for (const RunningJob& r : running) {
    if (!r.preempted_for.empty()) claimed.insert(r.job_id);
  }
  for (const Queued& q : queue_) {
    if (free.count(q.kind) == 0) free[q.kind] = registry.FreeWorkers(q.kind);
    std::vector<std::string>& available = free[q.kind];
    const std::string kind = KindName(q.kind);
    const int registered = registry.CountWorkers(q.kind);
    const int healthy = registry.CountHealthyWorkers(q.kind);

    // Over its owner's quota: waits without holding its kind; past the
    // starvation bound it holds its owner's quota against their later jobs.
    if (std::string over = quotas.Blocked(q.job_id, q.world_size); !over.empty()) {
      if (q.restarting || now - q.enqueued >= starvation_timeout_) {
        quotas.Reserve(q.job_id, q.world_size);
      }
      plan.reasons[q.job_id] = std::move(over);
      continue;
    }
    if (auto holder = held_by.find(q.kind); holder != held_by.end()) {
      plan.reasons[q.job_id] = absl::StrCat(
          "waiting behind ", holder->second, ", which holds the ", kind,
          " workers as they free up (", available.size(), " free of ", registered, " registered)");
      continue;
    }
    if (q.world_size <= static_cast<int>(available.size())) {
      Placement placement{q.job_id, {}};
      placement.worker_ids.assign(available.begin(), available.begin() + q.world_size);
      available.erase(available.begin(), available.begin() + q.world_size);
      quotas.Take(q.job_id, q.world_size);
      plan.reasons[q.job_id] = absl::StrCat("queued: ", q.world_size, " free ", kind,
                                            " workers are available; starting at the next "
                                            "scheduling round");
      plan.placements.push_back(std::move(placement));
      continue;
    }
    if (q.world_size > healthy) {
      // Never holds workers: nothing it waits for may be coming.
      plan.reasons[q.job_id] =
          absl::StrCat("waiting for ", q.world_size, " healthy ", kind,
                       " workers to register: ", registered, " registered (", healthy,
                       " healthy), so it cannot start until more join; jobs behind "
                       "it that fit start first");
      continue;
    }
    std::string reason =
        absl::StrCat("waiting for ", q.world_size, " free healthy ", kind, " workers (", registered,
                     " registered, ", available.size(), " free)", BusyWith(running, q.kind));
    // Preemption: the victims already suspending for it, then more if those
    // are not enough.
    int coming = 0;
    std::vector<std::string> suspending;
    std::vector<PreemptionCandidate> candidates;
    for (const RunningJob& r : running) {
      if (r.kind != q.kind) continue;
      if (r.preempted_for == q.job_id) {
        coming += r.workers;
        suspending.push_back(r.job_id);
      } else if (claimed.count(r.job_id) == 0) {
        candidates.push_back({r.job_id, r.priority, r.workers, r.started, r.not_preemptible});
      }
    }
    const int lacking = q.world_size - static_cast<int>(available.size()) - coming;
    bool preempting = !suspending.empty();
    if (preempting) {
      absl::StrAppend(&reason, "; preempting ", absl::StrJoin(suspending, ", "),
                      ": suspending at the next step boundary to release their workers");
    }
    if (lacking > 0 && !candidates.empty()) {
      VictimChoice choice = ChooseVictims(q.priority, lacking, candidates);
      if (!choice.victims.empty()) {
        claimed.insert(choice.victims.begin(), choice.victims.end());
        absl::StrAppend(&reason, "; ", choice.reason);
        plan.preemptions.push_back({q.job_id, q.priority, choice.victims, choice.reason});
        preempting = true;
      } else if (!preempting) {
        absl::StrAppend(&reason, "; ", choice.reason);
      }
    }
    if (preempting) {
      held_by[q.kind] = q.job_id;
      absl::StrAppend(&reason, "; jobs behind it of kind ", kind, " wait until it starts");
    } else if (q.restarting) {
      held_by[q.kind] = q.job_id;
      absl::StrAppend(&reason, "; restarting, so jobs behind it of kind ", kind,
                      " wait until it starts");
    } else if (now - q.enqueued >= starvation_timeout_) {
      held_by[q.kind] = q.job_id;
      absl::StrAppend(&reason, "; waited longer than ", absl::FormatDuration(starvation_timeout_),
                      ", so jobs behind it of kind ", kind, " wait until it starts");
    } else {
      absl::StrAppend(&reason, "; jobs behind it that fit may start first until it has waited ",
                      absl::FormatDuration(starvation_timeout_));
    }
    plan.reasons[q.job_id] = std::move(reason);
  }
  return plan;
}

std::vector<Placement> Scheduler::Schedule(const WorkerRegistry& registry, absl::Time now,
                                           const std::vector<RunningJob>& running,
                                           std::vector<PreemptionDecision>* preemptions,
                                           const QuotaLedger& quotas) {
  Plan plan = MakePlan(registry, now, running, quotas);
  for (const Placement& p : plan.placements) Remove(p.job_id);
  if (preemptions != nullptr) *preemptions = std::move(plan.preemptions);
  return std::move(plan.placements);
}

std::map<std::string, std::string> Scheduler::PendingReasons(
    const WorkerRegistry& registry, absl::Time now, const std::vector<RunningJob>& running,
    const QuotaLedger& quotas) const {
  return MakePlan(registry, now, running, quotas).reasons;
}

DryRunPlacement Scheduler::DryRun(const v1::JobSpec& spec, const WorkerRegistry& registry,
                                  const std::vector<RunningJob>& running, absl::Time now,
                                  QuotaLedger quotas, const std::string& owner) const {
  Scheduler with_it = *this;
  with_it.Enqueue(kDryRunJobId, spec, now);
  quotas.SetOwner(kDryRunJobId, owner);
  const Plan plan = with_it.MakePlan(registry, now, running, std::move(quotas));
  DryRunPlacement result;
  result.queue_position = with_it.Position(kDryRunJobId);
  result.reason = plan.reasons.at(kDryRunJobId);
  for (const Placement& p : plan.placements) {
    if (p.job_id != kDryRunJobId) continue;
    result.outcome = DryRunPlacement::Outcome::kStartNow;
    result.worker_ids = p.worker_ids;
  }
  for (const PreemptionDecision& d : plan.preemptions) {
    if (d.job_id != kDryRunJobId) continue;
    result.outcome = DryRunPlacement::Outcome::kPreempt;
    result.victims = d.victims;
  }
  return result;
}

}  // namespace tessera

// Gang scheduling with backfill and a starvation bound (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

std::string KindName(v1::DeviceKind kind) {
  return absl::AsciiStrToUpper(v1::DeviceKind_Name(kind));
}

}  // namespace

void Scheduler::Enqueue(const std::string& job_id, const v1::JobSpec& spec, absl::Time now) {
  queue_.push_back({job_id, spec.world_size(), spec.device_kind(), now});
}

void Scheduler::EnqueueRestart(const std::string& job_id, const v1::JobSpec& spec,
                               absl::Time now) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [](const Queued& q) { return !q.restarting; });
  queue_.insert(it, {job_id, spec.world_size(), spec.device_kind(), now, /*restarting=*/true});
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
                                    QuotaLedger quotas) const {
  Plan plan;
  std::map<v1::DeviceKind, std::vector<std::string>> free;  // oldest registration first
  std::map<v1::DeviceKind, std::string> held_by;            // kind -> the job holding it
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
          "waiting behind ", holder->second, ", which has waited longer than ",
          absl::FormatDuration(starvation_timeout_), " and holds the ", kind,
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
                     " registered, ", available.size(), " free)");
    if (q.restarting) {
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
                                           const QuotaLedger& quotas) {
  Plan plan = MakePlan(registry, now, quotas);
  for (const Placement& p : plan.placements) Remove(p.job_id);
  return std::move(plan.placements);
}

std::map<std::string, std::string> Scheduler::PendingReasons(const WorkerRegistry& registry,
                                                             absl::Time now,
                                                             const QuotaLedger& quotas) const {
  return MakePlan(registry, now, quotas).reasons;
}

}  // namespace tessera

// Worker registry bookkeeping (see worker_registry.h).
#include "server/worker_registry.h"

#include "absl/strings/str_cat.h"
#include "server/worker_reconciliation.h"

namespace tessera {

std::string WorkerRegistry::Register(const std::string& address, const v1::DeviceInfo& device,
                                     absl::Time now, const v1::WorkerActivity& activity) {
  // A daemon restarted at the same address is a new worker: forget the old one
  // only when it held no job (a held one is left for Sweep to report as lost).
  for (auto it = by_order_.begin(); it != by_order_.end();) {
    if (it->second.address() == address && it->second.job_id().empty()) {
      order_by_id_.erase(it->second.worker_id());
      last_seen_.erase(it->second.worker_id());
      it = by_order_.erase(it);
    } else {
      ++it;
    }
  }
  int order = next_id_++;
  std::string id = absl::StrCat("w-", order);
  v1::WorkerRecord record;
  record.set_worker_id(id);
  record.set_address(address);
  *record.mutable_device() = device;
  record.set_healthy(true);
  record.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  *record.mutable_activity() = activity;
  by_order_[order] = record;
  order_by_id_[id] = order;
  last_seen_[id] = now;
  return id;
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id, bool healthy,
                                       const std::string& reason, absl::Time now,
                                       const v1::WorkerActivity& activity,
                                       const std::string& address) {
  auto it = order_by_id_.find(worker_id);
  if (it == order_by_id_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  v1::WorkerRecord& record = by_order_[it->second];
  if (!address.empty() && address != record.address()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is registered from ",
                                            record.address(), ", not ", address));
  }
  record.set_healthy(healthy);
  record.set_health_reason(healthy ? "" : reason);
  record.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  *record.mutable_activity() = activity;
  last_seen_[worker_id] = now;
  return absl::OkStatus();
}

std::string WorkerRegistry::OrphanJob(const std::string& worker_id) const {
  const v1::WorkerRecord* record = Find(worker_id);
  if (record == nullptr) return "";
  return Reconcile(record->job_id(), record->activity().job_id()).abort_job_id;
}

void WorkerRegistry::MarkLost(const std::string& worker_id) {
  auto it = order_by_id_.find(worker_id);
  if (it == order_by_id_.end()) return;
  ++losses_;
  by_order_.erase(it->second);
  last_seen_.erase(worker_id);
  order_by_id_.erase(it);
}

std::vector<WorkerRegistry::Lost> WorkerRegistry::Sweep(absl::Time now) {
  std::vector<Lost> lost;
  for (auto it = by_order_.begin(); it != by_order_.end();) {
    const std::string id = it->second.worker_id();
    absl::Duration silent = now - last_seen_[id];
    if (silent > timeout_) {
      ++losses_;
      lost.push_back({id, it->second.job_id(),
                      absl::StrCat("worker ", id, " at ", it->second.address(),
                                   " lost: no heartbeat for ", absl::FormatDuration(silent))});
      order_by_id_.erase(id);
      last_seen_.erase(id);
      it = by_order_.erase(it);
    } else {
      ++it;
    }
  }
  return lost;
}

std::vector<std::string> WorkerRegistry::FreeWorkers(v1::DeviceKind kind) const {
  std::vector<std::string> free;
  for (const auto& [order, record] : by_order_) {
    if (record.device().kind() == kind && record.healthy() &&
        Reconcile(record.job_id(), record.activity().job_id()).free) {
      free.push_back(record.worker_id());
    }
  }
  return free;
}

int WorkerRegistry::CountWorkers(v1::DeviceKind kind) const {
  int n = 0;
  for (const auto& [order, record] : by_order_) n += record.device().kind() == kind ? 1 : 0;
  return n;
}

int WorkerRegistry::CountHealthyWorkers(v1::DeviceKind kind) const {
  int n = 0;
  for (const auto& [order, record] : by_order_) {
    n += record.device().kind() == kind && record.healthy() ? 1 : 0;
  }
  return n;
}

void WorkerRegistry::Assign(const std::string& worker_id, const std::string& job_id) {
  auto it = order_by_id_.find(worker_id);
  if (it != order_by_id_.end()) by_order_[it->second].set_job_id(job_id);
}

void WorkerRegistry::Release(const std::string& worker_id, const std::string& job_id,
                             bool confirmed_idle) {
  auto it = order_by_id_.find(worker_id);
  if (it == order_by_id_.end()) return;
  v1::WorkerRecord& record = by_order_[it->second];
  if (record.job_id() != job_id) return;
  record.clear_job_id();
  v1::WorkerActivity* activity = record.mutable_activity();
  if (confirmed_idle) {
    if (activity->job_id() == job_id) activity->Clear();
  } else if (activity->job_id().empty()) {
    // The last report may predate SetupJob; until a new one arrives, assume
    // the worker still holds the job.
    activity->set_job_id(job_id);
    activity->set_phase("unconfirmed");
  }
}

const v1::WorkerRecord* WorkerRegistry::Find(const std::string& worker_id) const {
  auto it = order_by_id_.find(worker_id);
  if (it == order_by_id_.end()) return nullptr;
  return &by_order_.at(it->second);
}

std::vector<v1::WorkerRecord> WorkerRegistry::List() const {
  std::vector<v1::WorkerRecord> out;
  for (const auto& [order, record] : by_order_) out.push_back(record);
  return out;
}

}  // namespace tessera

// The quota rule for one scheduling round (see quota_ledger.h).
#include "server/quota_ledger.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

std::string Workers(int n) { return absl::StrCat(n, n == 1 ? " worker" : " workers"); }

}  // namespace

void QuotaLedger::Hold(const std::string& owner, int workers) {
  if (owner.empty() || workers <= 0) return;
  held_[owner] += workers;
}

void QuotaLedger::SetOwner(const std::string& job_id, const std::string& owner) {
  owner_of_job_[job_id] = owner;
}

const std::string& QuotaLedger::OwnerOf(const std::string& job_id) const {
  static const std::string* const kNone = new std::string();
  auto it = owner_of_job_.find(job_id);
  return it == owner_of_job_.end() ? *kNone : it->second;
}

int QuotaLedger::Held(const std::string& owner) const {
  auto it = held_.find(owner);
  return it == held_.end() ? 0 : it->second;
}

std::string QuotaLedger::Blocked(const std::string& job_id, int world_size) const {
  const std::string& owner = OwnerOf(job_id);
  const std::optional<int> limit = quotas_.LimitFor(owner);
  if (!limit) return "";
  if (auto it = reserved_by_.find(owner); it != reserved_by_.end() && it->second != job_id) {
    return absl::StrCat("waiting for quota: ", it->second, ", queued earlier by user ", owner,
                        ", has waited past the starvation bound for ", owner, "'s quota, so ",
                        owner, "'s later jobs wait until it has started");
  }
  const int held = Held(owner);
  // Compared as a difference: held never exceeds the cluster's size, and
  // neither do the limit and world_size, so nothing overflows.
  if (world_size <= *limit - held) return "";
  const std::string which = quotas_.FromDefault(owner) ? " (the quota file's `*` line)" : "";
  if (world_size > *limit) {
    return absl::StrCat("waiting for quota: user ", owner, " may hold ", Workers(*limit), which,
                        " and this job needs ", world_size,
                        ", more than the quota; it waits until the quota is raised "
                        "(the coordinator's quota file, reloaded on SIGHUP)");
  }
  return absl::StrCat("waiting for quota: user ", owner, " may hold ", Workers(*limit), which,
                      ", holds ", held, ", this job needs ", world_size, "; it starts when ", owner,
                      "'s other jobs release ", Workers(held + world_size - *limit),
                      ", and jobs of other users start past it");
}

void QuotaLedger::Take(const std::string& job_id, int world_size) {
  Hold(OwnerOf(job_id), world_size);
}

void QuotaLedger::Reserve(const std::string& job_id, int world_size) {
  const std::string& owner = OwnerOf(job_id);
  const std::optional<int> limit = quotas_.LimitFor(owner);
  if (!limit || world_size > *limit) return;
  reserved_by_.emplace(owner, job_id);  // the first (oldest) job keeps it
}

}  // namespace tessera

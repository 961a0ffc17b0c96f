// Per-job rendezvous key-value store (see rendezvous_table.h).
#include "server/rendezvous_table.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

void RendezvousTable::Set(const std::string& job_id, const std::string& key,
                          const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[job_id][key] = value;
}

absl::StatusOr<std::vector<std::string>> RendezvousTable::Get(
    const std::string& job_id, const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = values_.find(job_id);
    if (it == values_.end()) return keys.empty();
    for (const std::string& k : keys) {
      if (it->second.count(k) == 0) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (values_[job_id].count(k) == 0) missing.push_back(k);
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous for ", job_id,
                                                    ": keys never set: ",
                                                    absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> out;
  for (const std::string& k : keys) out.push_back(values_[job_id][k]);
  return out;
}

absl::StatusOr<int64_t> RendezvousTable::Add(const std::string& job_id, const std::string& key,
                                             int64_t increment) {
  absl::MutexLock lock(&mu_);
  std::string& slot = values_[job_id][key];
  int64_t current = 0;
  if (!slot.empty() && !absl::SimpleAtoi(slot, &current)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous key ", key, " holds a non-integer value"));
  }
  current += increment;
  slot = absl::StrCat(current);
  return current;
}

void RendezvousTable::DropJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  values_.erase(job_id);
}

}  // namespace tessera

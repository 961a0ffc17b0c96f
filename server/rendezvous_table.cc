// Per-job rendezvous key-value store (see rendezvous_table.h).
#include "server/rendezvous_table.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "server/request_limits.h"

namespace tessera {
namespace {

absl::Status CheckJobAndKey(const std::string& job_id, const std::string& key) {
  RETURN_IF_ERROR(CheckStringLimit("job_id", job_id, kMaxIdBytes));
  return CheckStringLimit("key", key, kMaxRendezvousKeyBytes);
}

// At most this many missing keys are named in a timeout message.
constexpr size_t kMissingKeysNamed = 8;

}  // namespace

absl::Status RendezvousTable::Set(const std::string& job_id, const std::string& key,
                                  const std::string& value) {
  RETURN_IF_ERROR(CheckJobAndKey(job_id, key));
  RETURN_IF_ERROR(CheckStringLimit("value", value, kMaxRendezvousValueBytes));
  absl::MutexLock lock(&mu_);
  values_[job_id][key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RendezvousTable::Get(
    const std::string& job_id, const std::vector<std::string>& keys, absl::Duration timeout) {
  if (static_cast<int>(keys.size()) > kMaxRendezvousKeysPerGet) {
    return absl::InvalidArgumentError(absl::StrCat("keys: at most ", kMaxRendezvousKeysPerGet,
                                                   " per call (got ", keys.size(), ")"));
  }
  for (const std::string& k : keys) {
    RETURN_IF_ERROR(CheckJobAndKey(job_id, k));
  }
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
    const size_t unnamed =
        missing.size() > kMissingKeysNamed ? missing.size() - kMissingKeysNamed : 0;
    missing.resize(missing.size() - unnamed);
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous for ", job_id, ": keys never set: ", absl::StrJoin(missing, ", "),
        unnamed > 0 ? absl::StrCat(" and ", unnamed, " more") : ""));
  }
  std::vector<std::string> out;
  for (const std::string& k : keys) out.push_back(values_[job_id][k]);
  return out;
}

absl::StatusOr<int64_t> RendezvousTable::Add(const std::string& job_id, const std::string& key,
                                             int64_t increment) {
  RETURN_IF_ERROR(CheckJobAndKey(job_id, key));
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

// PrefixedRendezvousStore: forwards to the base store with prefixed keys.
#include "worker/comm/prefixed_rendezvous_store.h"

#include "absl/status/status.h"

namespace tessera {

absl::Status PrefixedRendezvousStore::Set(const std::string& key, const std::string& value) {
  if (base_ == nullptr) return absl::FailedPreconditionError("rendezvous store: none given");
  return base_->Set(prefix_ + key, value);
}

absl::StatusOr<std::vector<std::string>> PrefixedRendezvousStore::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  if (base_ == nullptr) return absl::FailedPreconditionError("rendezvous store: none given");
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  return base_->Get(prefixed, timeout);
}

absl::StatusOr<int64_t> PrefixedRendezvousStore::Add(const std::string& key, int64_t increment) {
  if (base_ == nullptr) return absl::FailedPreconditionError("rendezvous store: none given");
  return base_->Add(prefix_ + key, increment);
}

}  // namespace tessera

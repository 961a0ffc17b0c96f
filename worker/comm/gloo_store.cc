// GlooStore: Gloo's bootstrap store over a RendezvousStore (see gloo_store.h).
#include "worker/comm/gloo_store.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace tessera {

GlooStore::GlooStore(RendezvousStore* store, absl::Duration timeout, std::string prefix)
    : store_(store), timeout_(timeout), prefix_(std::move(prefix)) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous set of ", key, ": ", status.ToString()));
  }
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::vector<std::string> values = GetOrThrow({prefix_ + key}, timeout_);
  return std::vector<char>(values[0].begin(), values[0].end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  GetOrThrow(Prefixed(keys), timeout_);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  GetOrThrow(Prefixed(keys), absl::Milliseconds(timeout.count()));
}

std::vector<std::string> GlooStore::Prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(prefix_ + key);
  return out;
}

std::vector<std::string> GlooStore::GetOrThrow(const std::vector<std::string>& keys,
                                               absl::Duration timeout) {
  absl::StatusOr<std::vector<std::string>> values = store_->Get(keys, timeout);
  if (!values.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous get: ", values.status().ToString()));
  }
  if (values->size() != keys.size()) {
    throw gloo::IoException(absl::StrCat("rendezvous get returned ", values->size(),
                                         " values for ", keys.size(), " keys"));
  }
  return *std::move(values);
}

}  // namespace tessera

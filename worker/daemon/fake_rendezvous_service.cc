// In-memory Rendezvous for tests (see fake_rendezvous_service.h). Get blocks
// on the mutex's condition until every key exists, the request's timeout
// passes (DEADLINE_EXCEEDED, as the real service answers) or the caller
// goes away.
#include "worker/daemon/fake_rendezvous_service.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {

grpc::Status FakeRendezvousService::RendezvousSet(grpc::ServerContext*,
                                                  const v1::RendezvousSetRequest* req,
                                                  v1::RendezvousSetResponse*) {
  absl::MutexLock lock(&mu_);
  values_[{req->job_id(), req->key()}] = req->value();
  return grpc::Status::OK;
}

grpc::Status FakeRendezvousService::RendezvousGet(grpc::ServerContext* context,
                                                  const v1::RendezvousGetRequest* req,
                                                  v1::RendezvousGetResponse* resp) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(req->timeout_ms());
  absl::MutexLock lock(&mu_);
  last_get_timeout_ms_ = req->timeout_ms();
  auto all_present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : req->keys()) {
      if (values_.count({req->job_id(), key}) == 0) return false;
    }
    return true;
  };
  // Poll in short slices so a cancelled caller frees the handler thread.
  while (!all_present()) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "caller left");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("rendezvous keys missing after ", req->timeout_ms(), " ms"));
    }
    mu_.AwaitWithTimeout(absl::Condition(&all_present),
                         std::min(deadline - now, absl::Milliseconds(20)));
  }
  for (const std::string& key : req->keys()) resp->add_values(values_[{req->job_id(), key}]);
  return grpc::Status::OK;
}

grpc::Status FakeRendezvousService::RendezvousAdd(grpc::ServerContext*,
                                                  const v1::RendezvousAddRequest* req,
                                                  v1::RendezvousAddResponse* resp) {
  // Counters live among the values as decimal text, as in the coordinator,
  // so a Get of a counter's key sees it.
  absl::MutexLock lock(&mu_);
  std::string& stored = values_[{req->job_id(), req->key()}];
  int64_t counter = 0;
  if (!stored.empty() && !absl::SimpleAtoi(stored, &counter)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("key: ", req->key(), " holds a non-integer value"));
  }
  counter += req->increment();
  stored = absl::StrCat(counter);
  resp->set_value(counter);
  return grpc::Status::OK;
}

bool FakeRendezvousService::Lookup(const std::string& job_id, const std::string& key,
                                   std::string* value) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find({job_id, key});
  if (it == values_.end()) return false;
  *value = it->second;
  return true;
}

int32_t FakeRendezvousService::last_get_timeout_ms() {
  absl::MutexLock lock(&mu_);
  return last_get_timeout_ms_;
}

}  // namespace tessera

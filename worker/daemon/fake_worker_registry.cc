// Test-only WorkerRegistry (see fake_worker_registry.h).
#include "worker/daemon/fake_worker_registry.h"

#include "absl/strings/str_cat.h"

namespace tessera {

grpc::Status FakeWorkerRegistry::RegisterWorker(grpc::ServerContext*,
                                                const v1::RegisterWorkerRequest* req,
                                                v1::RegisterWorkerResponse* resp) {
  absl::MutexLock lock(&mu_);
  const std::string id = absl::StrCat("worker-", next_id_++);
  known_.insert(id);
  ++record_.registrations;
  record_.last_registration = *req;
  record_.last_id = id;
  resp->set_worker_id(id);
  resp->set_heartbeat_interval_ms(interval_ms_);
  for (const std::string& job : abort_job_ids_) resp->add_abort_job_ids(job);
  return grpc::Status::OK;
}

grpc::Status FakeWorkerRegistry::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                           v1::HeartbeatResponse* resp) {
  absl::MutexLock lock(&mu_);
  if (known_.count(req->worker_id()) == 0) {
    ++record_.rejected_heartbeats;
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("worker_id: ", req->worker_id(), " is not registered"));
  }
  ++record_.heartbeats;
  record_.last_heartbeat = *req;
  for (const std::string& job : abort_job_ids_) resp->add_abort_job_ids(job);
  if (req->stopping()) {
    ++record_.stopping_heartbeats;
    resp->set_suspending(suspending_);
    resp->set_not_suspended_reason(not_suspended_reason_);
  }
  return grpc::Status::OK;
}

void FakeWorkerRegistry::set_stopping_answer(bool suspending, std::string not_suspended_reason) {
  absl::MutexLock lock(&mu_);
  suspending_ = suspending;
  not_suspended_reason_ = std::move(not_suspended_reason);
}

void FakeWorkerRegistry::set_abort_job_ids(std::vector<std::string> ids) {
  absl::MutexLock lock(&mu_);
  abort_job_ids_ = std::move(ids);
}

FakeWorkerRegistry::Record FakeWorkerRegistry::record() {
  absl::MutexLock lock(&mu_);
  return record_;
}

void FakeWorkerRegistry::Forget() {
  absl::MutexLock lock(&mu_);
  known_.clear();
}

bool FakeWorkerRegistry::WaitFor(const std::function<bool(const Record&)>& done,
                                 absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto holds = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done(record_); };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

}  // namespace tessera

// Registration and heartbeat loop (see registration.h).
//
// Failures are logged at most once per kComplaintEvery so an absent
// coordinator does not flood the worker's log.
#include "worker/daemon/registration.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_status.h"

namespace tessera {
namespace {

constexpr absl::Duration kCallDeadline = absl::Seconds(5);
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
constexpr absl::Duration kComplaintEvery = absl::Seconds(5);
constexpr int kMinHeartbeatIntervalMs = 50;

}  // namespace

Registration::Registration(const std::string& coordinator_address,
                           v1::RegisterWorkerRequest request, std::function<Health()> health,
                           std::function<void(const std::string&)> on_registered,
                           std::shared_ptr<ClientCredentials> credentials)
    : credentials_(credentials != nullptr ? std::move(credentials)
                                          : std::make_shared<ClientCredentials>()),
      stub_(v1::WorkerRegistry::NewStub(credentials_->KeepaliveChannel(coordinator_address))),
      coordinator_address_(coordinator_address),
      request_(std::move(request)),
      health_(std::move(health)),
      on_registered_(std::move(on_registered)) {}

Registration::~Registration() { Stop(); }

void Registration::Start() { thread_ = std::thread([this] { Loop(); }); }

void Registration::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (call_in_flight_ != nullptr) call_in_flight_->TryCancel();
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::string Registration::worker_id() {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

bool Registration::BeginCall(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
  credentials_->Apply(context);
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  call_in_flight_ = context;
  return true;
}

void Registration::EndCall() {
  absl::MutexLock lock(&mu_);
  call_in_flight_ = nullptr;
}

v1::HeartbeatRequest Registration::HeartbeatRequestFor(const std::string& id) {
  const Health health = health_();
  v1::HeartbeatRequest request;
  request.set_worker_id(id);
  request.set_healthy(health.healthy);
  request.set_health_reason(health.reason);
  *request.mutable_activity() = health.activity;
  request.set_address(request_.address());
  absl::MutexLock lock(&mu_);
  if (stopping_announced_) {
    request.set_stopping(true);
    request.set_healthy(false);
    request.set_health_reason(health.healthy ? "shutting down" : health.reason);
  }
  return request;
}

absl::StatusOr<v1::HeartbeatResponse> Registration::AnnounceStopping() {
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    stopping_announced_ = true;
    id = worker_id_;
  }
  if (id.empty()) {
    return absl::FailedPreconditionError("not registered with the coordinator yet");
  }
  const v1::HeartbeatRequest request = HeartbeatRequestFor(id);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
  credentials_->Apply(&context);
  v1::HeartbeatResponse response;
  const grpc::Status status = stub_->Heartbeat(&context, request, &response);
  if (!status.ok()) {
    const absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("heartbeat to coordinator at ",
                                               coordinator_address_, ": ", s.message()));
  }
  for (const std::string& job : response.abort_job_ids()) {
    if (on_abort_) on_abort_(job);
  }
  return response;
}

void Registration::Loop() {
  absl::Duration backoff = kFirstBackoff;
  absl::Duration interval = absl::Seconds(1);
  absl::Time last_complaint = absl::InfinitePast();
  auto complain = [&](const char* what, const grpc::Status& status) {
    if (absl::Now() - last_complaint < kComplaintEvery) return;
    std::fprintf(stderr, "tessera-worker: %s coordinator at %s failed (%s); retrying\n", what,
                 coordinator_address_.c_str(), status.error_message().c_str());
    last_complaint = absl::Now();
  };
  std::string id;
  while (!stop_.HasBeenNotified()) {
    if (id.empty()) {
      grpc::ClientContext context;
      if (!BeginCall(&context)) return;
      v1::RegisterWorkerRequest request = request_;
      *request.mutable_activity() = health_().activity;
      v1::RegisterWorkerResponse response;
      grpc::Status status = stub_->RegisterWorker(&context, request, &response);
      EndCall();
      if (status.ok()) {
        id = response.worker_id();
        credentials_->set_session(response.session_token());
        interval =
            absl::Milliseconds(std::max(kMinHeartbeatIntervalMs, response.heartbeat_interval_ms()));
        backoff = kFirstBackoff;
        {
          absl::MutexLock lock(&mu_);
          worker_id_ = id;
        }
        on_registered_(id);
        for (const std::string& job : response.abort_job_ids()) {
          if (on_abort_) on_abort_(job);
        }
        continue;  // first heartbeat right away
      }
      if (stop_.HasBeenNotified()) return;
      complain("registering with", status);
      stop_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    const v1::HeartbeatRequest request = HeartbeatRequestFor(id);
    v1::HeartbeatResponse response;
    grpc::ClientContext context;
    if (!BeginCall(&context)) return;
    grpc::Status status = stub_->Heartbeat(&context, request, &response);
    EndCall();
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      std::fprintf(stderr, "tessera-worker: coordinator does not know worker %s; registering again\n",
                   id.c_str());
      id.clear();
      continue;
    }
    // Anything else (coordinator down, restarting): keep heartbeating at the
    // same pace; the coordinator decides when we are lost.
    if (!status.ok() && !stop_.HasBeenNotified()) complain("heartbeat to", status);
    for (const std::string& job : response.abort_job_ids()) {
      if (on_abort_) on_abort_(job);
    }
    stop_.WaitForNotificationWithTimeout(interval);
  }
}

}  // namespace tessera

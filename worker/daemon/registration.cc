// Registration and heartbeat loop (see registration.h).
#include "worker/daemon/registration.h"

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

Registration::Registration(const std::string& coordinator_address,
                           v1::RegisterWorkerRequest request, std::function<Health()> health,
                           std::function<void(const std::string&)> on_registered)
    : stub_(v1::WorkerRegistry::NewStub(
          grpc::CreateChannel(coordinator_address, grpc::InsecureChannelCredentials()))),
      coordinator_address_(coordinator_address),
      request_(std::move(request)),
      health_(std::move(health)),
      on_registered_(std::move(on_registered)) {}

Registration::~Registration() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void Registration::Start() { thread_ = std::thread([this] { Loop(); }); }

std::string Registration::worker_id() {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

void Registration::Loop() {
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Duration interval = absl::Seconds(1);
  absl::Time last_complaint = absl::InfinitePast();
  std::string id;
  while (!stop_.HasBeenNotified()) {
    if (id.empty()) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::RegisterWorkerResponse response;
      grpc::Status status = stub_->RegisterWorker(&context, request_, &response);
      if (status.ok()) {
        id = response.worker_id();
        interval = absl::Milliseconds(std::max(50, response.heartbeat_interval_ms()));
        backoff = absl::Milliseconds(100);
        {
          absl::MutexLock lock(&mu_);
          worker_id_ = id;
        }
        on_registered_(id);
        continue;
      }
      if (absl::Now() - last_complaint > absl::Seconds(5)) {
        std::fprintf(stderr, "tessera-worker: cannot register with coordinator at %s (%s); retrying\n",
                     coordinator_address_.c_str(), status.error_message().c_str());
        last_complaint = absl::Now();
      }
      stop_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    Health health = health_();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    request.set_healthy(health.healthy);
    request.set_health_reason(health.reason);
    v1::HeartbeatResponse response;
    grpc::Status status = stub_->Heartbeat(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      std::fprintf(stderr, "tessera-worker: coordinator forgot worker %s; registering again\n",
                   id.c_str());
      id.clear();
      continue;
    }
    stop_.WaitForNotificationWithTimeout(interval);
  }
}

}  // namespace tessera

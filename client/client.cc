// The v1 client library over gRPC (see client.h).
#include "client/client.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"

namespace tessera {

struct CoordinatorClient::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::mt19937 rng{std::random_device{}()};
};

namespace {

absl::Status Explain(const grpc::Status& status, const std::string& address) {
  absl::Status s = FromGrpcStatus(status);
  if (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(s.code(), absl::StrCat("cannot reach coordinator at ", address, " (",
                                               s.message(), ")"));
  }
  return s;
}

}  // namespace

CoordinatorClient::CoordinatorClient(const std::string& address, ClientOptions options)
    : address_(address), options_(options), impl_(std::make_unique<Impl>()) {
  impl_->channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  impl_->stub = v1::Coordinator::NewStub(impl_->channel);
}

CoordinatorClient::~CoordinatorClient() = default;

// Runs `call` with a fresh deadline per attempt, retrying UNAVAILABLE while
// `retryable()` says so.
template <typename Call>
static grpc::Status WithRetries(const ClientOptions& options, std::mt19937& rng,
                                const std::function<bool()>& retryable, Call call) {
  absl::Duration backoff = options.initial_backoff;
  grpc::Status status;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options.call_timeout));
    status = call(&context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= options.max_attempts ||
        !retryable()) {
      return status;
    }
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    absl::SleepFor(backoff * jitter(rng));
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

absl::StatusOr<v1::Job> CoordinatorClient::SubmitJob(const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  bool ever_connected = false;
  auto retryable = [&] {
    grpc_connectivity_state state = impl_->channel->GetState(false);
    ever_connected = ever_connected || state == GRPC_CHANNEL_READY;
    return !ever_connected;
  };
  grpc::Status status = WithRetries(options_, impl_->rng, retryable, [&](grpc::ClientContext* c) {
    return impl_->stub->SubmitJob(c, request, &response);
  });
  if (!status.ok()) return Explain(status, address_);
  return response.job();
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = WithRetries(options_, impl_->rng, [] { return true; },
                                    [&](grpc::ClientContext* c) {
                                      return impl_->stub->GetJob(c, request, &job);
                                    });
  if (!status.ok()) return Explain(status, address_);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs(
    const std::vector<v1::JobState>& states) {
  v1::ListJobsRequest request;
  for (v1::JobState s : states) request.add_states(s);
  v1::ListJobsResponse response;
  grpc::Status status = WithRetries(options_, impl_->rng, [] { return true; },
                                    [&](grpc::ClientContext* c) {
                                      return impl_->stub->ListJobs(c, request, &response);
                                    });
  if (!status.ok()) return Explain(status, address_);
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id,
                                                     const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status status = WithRetries(options_, impl_->rng, [] { return true; },
                                    [&](grpc::ClientContext* c) {
                                      return impl_->stub->CancelJob(c, request, &job);
                                    });
  if (!status.ok()) return Explain(status, address_);
  return job;
}

absl::StatusOr<std::vector<v1::WorkerRecord>> CoordinatorClient::ListWorkers() {
  v1::ListWorkersRequest request;
  v1::ListWorkersResponse response;
  grpc::Status status = WithRetries(options_, impl_->rng, [] { return true; },
                                    [&](grpc::ClientContext* c) {
                                      return impl_->stub->ListWorkers(c, request, &response);
                                    });
  if (!status.ok()) return Explain(status, address_);
  return std::vector<v1::WorkerRecord>(response.workers().begin(), response.workers().end());
}

absl::Status CoordinatorClient::WatchJob(const std::string& job_id, int from_step,
                                         const std::function<bool(const v1::JobEvent&)>& on_event) {
  int64_t last_sequence = 0;
  int failures = 0;
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    grpc::ClientContext context;  // no overall deadline: jobs run for hours
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_from_step(from_step);
    auto reader = impl_->stub->WatchJob(&context, request);
    v1::JobEvent event;
    bool stop = false;
    while (!stop && reader->Read(&event)) {
      failures = 0;
      if (event.sequence() <= last_sequence) continue;  // already delivered
      last_sequence = event.sequence();
      if (event.has_step()) from_step = event.step().step() + 1;
      if (!on_event(event)) stop = true;
    }
    if (stop) {
      context.TryCancel();
      reader->Finish();
      return absl::OkStatus();
    }
    grpc::Status status = reader->Finish();
    if (status.ok()) return absl::OkStatus();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        ++failures >= options_.max_attempts) {
      return Explain(status, address_);
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace tessera

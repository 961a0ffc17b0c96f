// The v1 client library over gRPC (see client.h).
//
// Whether a failure means "the coordinator is unreachable" is decided from
// the channel's connectivity state: an UNAVAILABLE or DEADLINE_EXCEEDED with
// the channel not READY means no connection existed, and the status then
// carries a payload that IsCoordinatorUnreachable reads. gRPC's own
// reconnect backoff starts at ours so that retries really reconnect (its
// minimum, which is also the connect timeout, keeps gRPC's default).
#include "client/client.h"

#include <algorithm>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"

namespace tessera {
namespace {

constexpr char kUnreachablePayload[] = "tessera.client/unreachable";

bool IsConnectionError(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// gRPC's transport messages are long ("failed to connect to all addresses;
// last error: UNKNOWN: ipv4:...: Failed to connect to remote host:
// Connection refused"); a person needs the last part.
std::string ShortReason(const std::string& message, absl::Duration timeout) {
  std::string lower = absl::AsciiStrToLower(message);
  if (absl::StrContains(lower, "connection refused")) return "connection refused";
  if (absl::StrContains(lower, "dns") || absl::StrContains(lower, "resolve")) {
    return "cannot resolve the host name";
  }
  if (absl::StrContains(lower, "no route to host")) return "no route to host";
  if (absl::StrContains(lower, "network is unreachable")) return "network is unreachable";
  if (absl::StrContains(lower, "deadline")) {
    return absl::StrCat("no answer within ", absl::FormatDuration(timeout));
  }
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return "connection timed out";
  }
  if (absl::StrContains(lower, "connection reset") || absl::StrContains(lower, "socket closed") ||
      absl::StrContains(lower, "end of tcp stream")) {
    return "connection lost";
  }
  if (absl::StrContains(lower, "ssl") || absl::StrContains(lower, "handshake") ||
      absl::StrContains(lower, "certificate")) {
    return "TLS handshake failed; check --tls_ca and that client and coordinator both use TLS";
  }
  if (absl::StrContains(lower, "failed to connect")) return "connection failed";
  return message;
}

absl::Status Unreachable(const std::string& address, const std::string& reason) {
  absl::Status status = absl::UnavailableError(
      absl::StrCat("cannot reach coordinator at ", address, " (", reason, ")"));
  status.SetPayload(kUnreachablePayload, absl::Cord("1"));
  return status;
}

absl::Duration Jittered(absl::Duration backoff, std::mt19937& rng) {
  return backoff * std::uniform_real_distribution<double>(0.5, 1.5)(rng);
}

}  // namespace

struct CoordinatorClient::Impl {
  absl::Status credentials_status;
  std::shared_ptr<ClientCredentials> credentials;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::mt19937 rng{std::random_device{}()};

  // The status a caller sees for a failed RPC.
  absl::Status Explain(const grpc::Status& status, const std::string& address,
                       absl::Duration timeout) {
    if (IsConnectionError(status.error_code()) &&
        channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
      return Unreachable(address, ShortReason(status.error_message(), timeout));
    }
    return FromGrpcStatus(status);
  }

  // Runs `call` with a fresh deadline per attempt, retrying UNAVAILABLE.
  template <typename Call>
  grpc::Status WithRetries(const ClientOptions& options, Call call) {
    if (!credentials_status.ok()) return ToGrpcStatus(credentials_status);
    absl::Duration backoff = options.initial_backoff;
    for (int attempt = 1;; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options.call_timeout));
      credentials->Apply(&context);
      grpc::Status status = call(&context);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= options.max_attempts) {
        return status;
      }
      absl::SleepFor(Jittered(backoff, rng));
      backoff = std::min(backoff * 2, options.max_backoff);
    }
  }

  // Connects (retrying the connection only), then sends `call` once with a
  // deadline: for requests whose repeat would not mean the same.
  template <typename Call>
  grpc::Status SendOnce(const ClientOptions& options, const std::string& address, Call call) {
    if (!credentials_status.ok()) return ToGrpcStatus(credentials_status);
    if (absl::Status connected = Connect(options, address); !connected.ok()) {
      return ToGrpcStatus(connected);
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options.call_timeout));
    credentials->Apply(&context);
    return call(&context);
  }

  // Waits until the channel is READY. A connection attempt that fails
  // (TRANSIENT_FAILURE) is retried with backoff; OK means a request sent now
  // goes out on an established connection.
  absl::Status Connect(const ClientOptions& options, const std::string& address) {
    absl::Duration backoff = options.initial_backoff;
    for (int attempt = 1;; ++attempt) {
      const absl::Time deadline = absl::Now() + options.call_timeout;
      grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
      while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
             state != GRPC_CHANNEL_SHUTDOWN) {
        if (!channel->WaitForStateChange(state, absl::ToChronoTime(deadline))) {
          return Unreachable(address, absl::StrCat("no connection within ",
                                                   absl::FormatDuration(options.call_timeout)));
        }
        state = channel->GetState(/*try_to_connect=*/true);
      }
      if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
      if (attempt >= options.max_attempts || state == GRPC_CHANNEL_SHUTDOWN) {
        // Ask a fail-fast RPC for the transport's reason.
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
        credentials->Apply(&context);
        v1::ListWorkersRequest request;
        v1::ListWorkersResponse response;
        grpc::Status probe = stub->ListWorkers(&context, request, &response);
        return Unreachable(address, probe.ok() ? "connection failed"
                                               : ShortReason(probe.error_message(),
                                                             options.call_timeout));
      }
      absl::SleepFor(Jittered(backoff, rng));
      backoff = std::min(backoff * 2, options.max_backoff);
    }
  }
};

CoordinatorClient::CoordinatorClient(const std::string& address, ClientOptions options)
    : address_(address), options_(options), impl_(std::make_unique<Impl>()) {
  grpc::ChannelArguments args;
  const int initial_ms = static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::max(initial_ms, 1));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              std::max(static_cast<int>(absl::ToInt64Milliseconds(options.max_backoff)), 1));
  ApplyClientKeepalive(args, options.keepalive_time, options.keepalive_timeout);
  TlsFlags tls{options.tls_cert_file, options.tls_key_file, options.tls_ca_file};
  absl::StatusOr<std::shared_ptr<ClientCredentials>> credentials =
      ClientCredentials::Load(tls, options.token);
  if (credentials.ok()) {
    impl_->credentials = *std::move(credentials);
  } else {
    impl_->credentials_status = credentials.status();
    impl_->credentials = std::make_shared<ClientCredentials>();
  }
  impl_->channel = impl_->credentials->Channel(address, args);
  impl_->stub = v1::Coordinator::NewStub(impl_->channel);
}

CoordinatorClient::~CoordinatorClient() = default;

absl::Status CoordinatorClient::credentials_status() const { return impl_->credentials_status; }

absl::StatusOr<v1::Job> CoordinatorClient::SubmitJob(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(impl_->credentials_status);
  RETURN_IF_ERROR(impl_->Connect(options_, address_));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  impl_->credentials->Apply(&context);
  grpc::Status status = impl_->stub->SubmitJob(&context, request, &response);
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return response.job();
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = impl_->WithRetries(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->GetJob(c, request, &job);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return job;
}

absl::StatusOr<v1::Fp8Numerics> CoordinatorClient::GetFp8Numerics(const std::string& job_id) {
  absl::StatusOr<v1::Job> job = GetJob(job_id);
  if (!job.ok()) return job.status();
  if (job->has_last_numerics()) return job->last_numerics();
  if (job->spec().fp8().stats_interval_steps() <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " takes no FP8 statistics: set fp8.stats_interval_steps (e.g. 100) in ",
        "its job file; they can also be turned on when resuming from a checkpoint"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job_id, " has no FP8 statistics yet: they are taken at step 0 and "
                   "every ", job->spec().fp8().stats_interval_steps(), " steps after"));
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::ListJobsPage(
    const std::vector<v1::JobState>& states, int page_size, const std::string& page_token) {
  JobFilter filter;
  filter.states = states;
  return ListJobsPageMatching(filter, page_size, page_token);
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::ListJobsPageMatching(
    const JobFilter& filter, int page_size, const std::string& page_token) {
  v1::ListJobsRequest request;
  for (v1::JobState s : filter.states) request.add_states(s);
  request.set_owner(filter.owner);
  request.set_only_mine(filter.only_mine);
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListJobsResponse response;
  grpc::Status status = impl_->WithRetries(options_, [&](grpc::ClientContext* c) {
    response.Clear();
    return impl_->stub->ListJobs(c, request, &response);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return response;
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs(
    const std::vector<v1::JobState>& states) {
  JobFilter filter;
  filter.states = states;
  return ListJobsMatching(filter);
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobsMatching(const JobFilter& filter) {
  std::vector<v1::Job> jobs;
  std::string token;
  do {
    ASSIGN_OR_RETURN(const v1::ListJobsResponse page, ListJobsPageMatching(filter, 0, token));
    // An empty page that is not the last, or a token handed back unchanged,
    // would never end the loop.
    if (!page.next_page_token().empty() &&
        (page.jobs().empty() || page.next_page_token() == token)) {
      return absl::DataLossError("coordinator's ListJobs pages do not advance");
    }
    jobs.insert(jobs.end(), page.jobs().begin(), page.jobs().end());
    token = page.next_page_token();
  } while (!token.empty());
  return jobs;
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id,
                                                     const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status status = impl_->WithRetries(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->CancelJob(c, request, &job);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::CheckpointJob(const std::string& job_id) {
  v1::CheckpointJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = impl_->SendOnce(options_, address_, [&](grpc::ClientContext* c) {
    return impl_->stub->CheckpointJob(c, request, &job);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::SuspendJob(const std::string& job_id,
                                                      const std::string& reason) {
  v1::SuspendJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status status = impl_->SendOnce(options_, address_, [&](grpc::ClientContext* c) {
    return impl_->stub->SuspendJob(c, request, &job);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return job;
}

absl::StatusOr<v1::PlacementExplanation> CoordinatorClient::ExplainPlacement(
    const v1::JobSpec& spec) {
  v1::ExplainPlacementRequest request;
  *request.mutable_spec() = spec;
  v1::PlacementExplanation placement;
  grpc::Status status = impl_->WithRetries(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->ExplainPlacement(c, request, &placement);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return placement;
}

absl::StatusOr<v1::Job> CoordinatorClient::ResumeJob(const std::string& job_id) {
  v1::ResumeJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = impl_->SendOnce(options_, address_, [&](grpc::ClientContext* c) {
    return impl_->stub->ResumeJob(c, request, &job);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return job;
}

absl::Status CoordinatorClient::DeleteJob(const std::string& job_id) {
  RETURN_IF_ERROR(impl_->credentials_status);
  RETURN_IF_ERROR(impl_->Connect(options_, address_));
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  v1::DeleteJobResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  impl_->credentials->Apply(&context);
  grpc::Status status = impl_->stub->DeleteJob(&context, request, &response);
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return absl::OkStatus();
}

// The health protocol's two messages are tiny and fixed (grpc/health/v1/
// health.proto: HealthCheckRequest { string service = 1; },
// HealthCheckResponse { ServingStatus status = 1; }), so they are written
// and read with protobuf's wire-format streams on a generic stub instead of
// generating code from a proto outside this repository.
absl::StatusOr<std::string> CoordinatorClient::CheckHealth(const std::string& service) {
  RETURN_IF_ERROR(impl_->credentials_status);
  std::string request_bytes;
  {
    google::protobuf::io::StringOutputStream raw(&request_bytes);
    google::protobuf::io::CodedOutputStream coded(&raw);
    if (!service.empty()) {
      coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
          1, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      coded.WriteVarint32(static_cast<uint32_t>(service.size()));
      coded.WriteString(service);
    }
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  grpc::GenericStub generic(impl_->channel);
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("health: unreadable response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  uint32_t serving = 0;  // UNKNOWN
  while (const uint32_t tag = in.ReadTag()) {
    if (tag == google::protobuf::internal::WireFormatLite::MakeTag(
                   1, google::protobuf::internal::WireFormatLite::WIRETYPE_VARINT)) {
      if (!in.ReadVarint32(&serving)) return absl::InternalError("health: malformed response");
    } else if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) {
      return absl::InternalError("health: malformed response");
    }
  }
  switch (serving) {
    case 1: return std::string("SERVING");
    case 2: return std::string("NOT_SERVING");
    case 3: return std::string("SERVICE_UNKNOWN");
    default: return std::string("UNKNOWN");
  }
}

absl::StatusOr<std::vector<v1::WorkerRecord>> CoordinatorClient::ListWorkers() {
  v1::ListWorkersRequest request;
  v1::ListWorkersResponse response;
  grpc::Status status = impl_->WithRetries(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->ListWorkers(c, request, &response);
  });
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return std::vector<v1::WorkerRecord>(response.workers().begin(), response.workers().end());
}

absl::Status CoordinatorClient::WatchJob(
    const std::string& job_id, int from_step,
    const std::function<bool(const v1::JobEvent&)>& on_event) {
  RETURN_IF_ERROR(impl_->credentials_status);
  int64_t last_sequence = 0;  // events up to here were delivered
  int failures = 0;
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    grpc::ClientContext context;  // no deadline: jobs run for hours
    impl_->credentials->Apply(&context);
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_from_step(from_step);
    // A re-subscription continues after the last event delivered. It keeps
    // the original from_step: a restarted attempt may have reported steps
    // again that lie before the newest step seen so far.
    request.set_after_sequence(last_sequence);
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
        impl_->stub->WatchJob(&context, request);
    v1::JobEvent event;
    bool stopped = false;
    while (!stopped && reader->Read(&event)) {
      failures = 0;
      backoff = options_.initial_backoff;
      if (event.sequence() <= last_sequence) continue;  // replayed after a re-subscribe
      last_sequence = event.sequence();
      stopped = !on_event(event);
    }
    if (stopped) {
      context.TryCancel();
      (void)reader->Finish();
      return absl::OkStatus();
    }
    grpc::Status status = reader->Finish();
    if (status.ok()) return absl::OkStatus();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        ++failures >= options_.max_attempts) {
      return impl_->Explain(status, address_, options_.call_timeout);
    }
    absl::SleepFor(Jittered(backoff, impl_->rng));
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::Status CoordinatorClient::StreamJobLogs(
    const std::string& job_id, const std::vector<int>& ranks, bool follow,
    const std::function<bool(const v1::LogLine&)>& on_line) {
  RETURN_IF_ERROR(impl_->credentials_status);
  grpc::ClientContext context;  // no deadline when following: jobs run for hours
  impl_->credentials->Apply(&context);
  if (!follow) context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(5)));
  v1::StreamJobLogsRequest request;
  request.set_job_id(job_id);
  for (int r : ranks) request.add_ranks(r);
  request.set_follow(follow);
  std::unique_ptr<grpc::ClientReader<v1::LogLine>> reader =
      impl_->stub->StreamJobLogs(&context, request);
  v1::LogLine line;
  while (reader->Read(&line)) {
    if (!on_line(line)) {
      context.TryCancel();
      (void)reader->Finish();
      return absl::OkStatus();
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return impl_->Explain(status, address_, options_.call_timeout);
  return absl::OkStatus();
}

bool IsCoordinatorUnreachable(const absl::Status& status) {
  return status.GetPayload(kUnreachablePayload).has_value();
}

}  // namespace tessera

// CoordinatorClient: the C++ client library for the v1 Coordinator API, used
// by the `tessera` CLI and by orchestration tools written in C++. No gRPC
// type appears here; results are absl::Status / absl::StatusOr.
//
// Every unary call carries a deadline. UNAVAILABLE is retried with
// exponential backoff and jitter where retrying is safe: GetJob, ListJobs
// (each page), ListWorkers, ExplainPlacement, CancelJob (idempotent on the
// server) and
// WatchJob, which re-subscribes after the last event it delivered
// (WatchJobRequest.after_sequence) and never delivers an event twice.
// SubmitJob and DeleteJob retry only the connection: once the channel is connected the request is sent exactly
// once, so a job is never submitted twice and a delete that succeeded is
// never reported as NOT_FOUND by its own retry. CheckpointJob, SuspendJob
// and ResumeJob are sent once the same way: a repeated resume or suspend
// would be refused for the state the first one caused.
#ifndef TESSERA_CLIENT_CLIENT_H_
#define TESSERA_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_keepalive.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

inline constexpr char kDefaultCoordinatorAddress[] = "127.0.0.1:50051";

struct ClientOptions {
  // Deadline of each unary attempt (and of each connection attempt).
  absl::Duration call_timeout = absl::Seconds(10);
  // Attempts per call for retryable calls, the first included; for WatchJob,
  // consecutive failed re-subscriptions before giving up.
  int max_attempts = 4;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // WatchJob has no overall deadline; HTTP/2 keepalive pings detect a
  // coordinator that stopped answering without closing the connection.
  // keepalive_time below kMinKeepalivePing (10 s, what servers accept) is
  // raised to it (common/grpc_keepalive.h).
  absl::Duration keepalive_time = kClientKeepalivePing;
  absl::Duration keepalive_timeout = kClientKeepaliveTimeout;
  // TLS: the CA that signed the coordinator's certificate (PEM file; empty
  // with cert/key empty: plaintext), and an optional client certificate.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Bearer token sent on every call (empty: none).
  std::string token;
};

class CoordinatorClient {
 public:
  explicit CoordinatorClient(const std::string& address, ClientOptions options = {});
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  const std::string& address() const { return address_; }
  // INVALID_ARGUMENT naming the option if the TLS files could not be read;
  // every call then returns this status.
  absl::Status credentials_status() const;

  // INVALID_ARGUMENT (from the coordinator) names the bad spec field.
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  // NOT_FOUND for an unknown id.
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // The job's newest FP8 statistics record (Job.last_numerics). NOT_FOUND
  // for an unknown job; FAILED_PRECONDITION when the job takes no
  // statistics (saying how to turn them on) or has not reached its first
  // statistics step.
  absl::StatusOr<v1::Fp8Numerics> GetFp8Numerics(const std::string& job_id);
  // Which jobs ListJobs returns (ListJobsRequest in coordinator.proto).
  struct JobFilter {
    std::vector<v1::JobState> states;  // empty: every state
    std::string owner;                 // empty: every user's
    bool only_mine = false;            // only the caller's (overrides owner)
  };
  // Every job, newest first, following the coordinator's pages until the
  // last; empty `states` means every state.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const std::vector<v1::JobState>& states = {});
  absl::StatusOr<std::vector<v1::Job>> ListJobsMatching(const JobFilter& filter);
  // One page (see ListJobsRequest in coordinator.proto).
  absl::StatusOr<v1::ListJobsResponse> ListJobsPage(const std::vector<v1::JobState>& states,
                                                    int page_size, const std::string& page_token);
  absl::StatusOr<v1::ListJobsResponse> ListJobsPageMatching(const JobFilter& filter,
                                                            int page_size,
                                                            const std::string& page_token);
  // FAILED_PRECONDITION if the job already ended.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason = "");
  // NOT_FOUND for an unknown job; FAILED_PRECONDITION if it has not ended.
  absl::Status DeleteJob(const std::string& job_id);
  // A checkpoint at the job's next step boundary; the job goes on. Returns
  // the job as it is when asked (still RUNNING). NOT_FOUND;
  // FAILED_PRECONDITION without checkpoint.dir or when not RUNNING.
  absl::StatusOr<v1::Job> CheckpointJob(const std::string& job_id);
  // A checkpoint at the next step boundary, then the job releases its
  // workers and becomes SUSPENDED. Errors as CheckpointJob.
  absl::StatusOr<v1::Job> SuspendJob(const std::string& job_id, const std::string& reason = "");
  // Queues a SUSPENDED job again; FAILED_PRECONDITION for any other state.
  absl::StatusOr<v1::Job> ResumeJob(const std::string& job_id);
  // Where a job with `spec` would run if submitted now, whom it would
  // preempt, or what it would wait for; creates nothing, so it is retried
  // like GetJob. INVALID_ARGUMENT (from the coordinator) names a bad field.
  absl::StatusOr<v1::PlacementExplanation> ExplainPlacement(const v1::JobSpec& spec);
  absl::StatusOr<std::vector<v1::WorkerRecord>> ListWorkers();
  // grpc.health.v1.Health/Check of `service` ("" for the server as a
  // whole) at this address: "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or
  // "UNKNOWN". No token is needed; TLS follows the options. For probes
  // (systemd, Kubernetes exec probes) that must speak TLS, which the
  // kubelet's own gRPC probe cannot.
  absl::StatusOr<std::string> CheckHealth(const std::string& service);

  // Streams the job's events to `on_event`, step metrics from `from_step`
  // on (state changes and worker errors are always replayed). Returns OK
  // after the stream's last event (the job's terminal state) or when
  // `on_event` returns false; an error when the job is unknown or the
  // coordinator stays unreachable. A job that restarts reports steps again
  // (StepMetrics.attempt); StepHistory (step_history.h) keeps one per step.
  absl::Status WatchJob(const std::string& job_id, int from_step,
                        const std::function<bool(const v1::JobEvent&)>& on_event);

  // The job's log lines from its workers (ranks: empty for every rank), in
  // time order; with `follow`, then new lines until the job ends. Stops
  // early, with OK, when `on_line` returns false.
  absl::Status StreamJobLogs(const std::string& job_id, const std::vector<int>& ranks,
                             bool follow, const std::function<bool(const v1::LogLine&)>& on_line);

 private:
  struct Impl;
  std::string address_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// True for the statuses this client returns when it could not reach the
// coordinator at all (as opposed to the coordinator answering with an
// error). Their message reads "cannot reach coordinator at ADDR (REASON)".
bool IsCoordinatorUnreachable(const absl::Status& status);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLIENT_H_

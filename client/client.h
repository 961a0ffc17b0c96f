// CoordinatorClient: the C++ client library for the v1 API, used by the
// `tessera` CLI and by orchestration tools written in C++.
//
// Every call carries a deadline. UNAVAILABLE is retried with exponential
// backoff and jitter where retrying is safe (GetJob, ListJobs, ListWorkers,
// CancelJob, which is idempotent, and WatchJob, which re-subscribes and skips
// events it already delivered). SubmitJob is retried only while the channel
// has never connected, so a job is never submitted twice.
#ifndef TESSERA_CLIENT_CLIENT_H_
#define TESSERA_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

struct ClientOptions {
  absl::Duration call_timeout = absl::Seconds(10);
  int max_attempts = 4;                       // per call, for retryable calls
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
};

class CoordinatorClient {
 public:
  explicit CoordinatorClient(const std::string& address, ClientOptions options = {});
  ~CoordinatorClient();

  const std::string& address() const { return address_; }
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const std::vector<v1::JobState>& states = {});
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason = "");
  absl::StatusOr<std::vector<v1::WorkerRecord>> ListWorkers();
  // Streams events to `on_event` until the job's terminal event (OK), the
  // callback returns false (OK), or an unrecoverable error.
  absl::Status WatchJob(const std::string& job_id, int from_step,
                        const std::function<bool(const v1::JobEvent&)>& on_event);

 private:
  struct Impl;
  std::string address_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLIENT_H_

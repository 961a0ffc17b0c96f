// The coordinator's status page (--web_listen): a small web page that works
// offline (no CDN; its one script is served from here) listing jobs and
// workers, with a live loss chart per job, training and validation, redrawn
// as steps arrive. It reads the same coordinator state as `tessera status`
// and /metrics (MetricsSource) and changes nothing.
//
// Routes (GET; everything else is 404):
//   /                        the page (status_page/index.html)
//   /status.js               its script (status_page/status.js)
//   /api/jobs                {"time_unix_ms", "jobs": [...], "workers": [...]}:
//                            the newest kMaxListedJobs jobs, newest first,
//                            and every registered worker
//   /api/jobs/ID/steps       {"id", "state", "steps", "steps_done", "train":
//                            [[step, loss], ...], "validation": [[step,
//                            loss], ...], "stride"}: one point per step
//                            (a restarted job's steps counted once, the
//                            latest attempt's; common/step_history.h), at
//                            most kMaxChartPoints (beyond, every stride-th
//                            step and always the last), "numerics": the
//                            newest FP8 statistics record's kMaxNumericsRows
//                            worst tensors ({"step", "count", "tensors":
//                            [{"name", "format", "amax", "scale",
//                            "saturated", "underflow"}]}; null without
//                            one); 404 for an unknown job, 400 for a
//                            malformed id
//
// The page shows job names, states, losses and worker addresses, never job
// specs, paths or credentials. It has no authentication: like /metrics,
// serve it on a loopback or trusted address. Its Content-Security-Policy
// allows only this origin's script and fetches.
#ifndef TESSERA_SERVER_STATUS_PAGE_H_
#define TESSERA_SERVER_STATUS_PAGE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http_endpoint.h"
#include "server/metrics_tracker.h"

namespace tessera {

inline constexpr int kMaxListedJobs = 500;
inline constexpr int kMaxChartPoints = 5000;
// Rows of the FP8 numerics panel: the worst tensors of the newest record.
inline constexpr int kMaxNumericsRows = 8;

// The JSON bodies, for tests and the routes below.
std::string StatusPageJobsJson(const std::vector<v1::Job>& jobs,
                               const std::vector<v1::WorkerRecord>& workers, absl::Time now);
// `job` and its events in sequence order.
std::string StatusPageStepsJson(const v1::Job& job, const std::vector<v1::JobEvent>& events);

// The routes above over `source` (list_jobs, list_workers, job_events).
std::vector<HttpRoute> StatusPageRoutes(MetricsSource source);

class StatusPage {
 public:
  // INVALID_ARGUMENT naming --web_listen if it cannot listen there.
  static absl::StatusOr<std::unique_ptr<StatusPage>> Start(const std::string& listen,
                                                           MetricsSource source);
  const std::string& address() const { return endpoint_->address(); }

 private:
  explicit StatusPage(std::unique_ptr<HttpEndpoint> endpoint) : endpoint_(std::move(endpoint)) {}
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_STATUS_PAGE_H_

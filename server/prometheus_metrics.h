// The coordinator's Prometheus endpoint: plain HTTP GET /metrics on its own
// listen address (--metrics_listen), in the text format prometheus-cpp's
// core writes, served by http_endpoint.h. This file is the only one that
// knows prometheus-cpp; the numbers come from
// MetricsTracker (metrics_tracker.h), synced at each scrape. Exposed, in
// base units with `_total` counters and low-cardinality labels:
//   tessera_jobs{state}                      jobs by state (gauge)
//   tessera_workers{health}                  workers healthy / unhealthy (gauge)
//   tessera_job_steps_total{job}             steps recorded per job
//   tessera_job_tokens_total{job}            tokens trained per job
//   tessera_step_duration_seconds            slowest rank's step time (histogram)
//   tessera_step_control_overhead_seconds    time the coordinator adds per step (histogram)
//   tessera_preemption_seconds               decision to a preempted job's workers free (histogram)
//   tessera_preemption_steps_redone_total    steps preempted jobs run again
//   tessera_slow_rank_slowdown_ratio{job,worker}  a rank named slow: how much slower (gauge)
//   tessera_job_fp8_worst_saturation_ratio{job}   newest FP8 statistics: worst tensor (gauge)
//   tessera_job_fp8_worst_underflow_ratio{job}    likewise for underflow (gauge)
//   tessera_build_info{version,commit,api}   always 1 (common/build_info.h)
// The endpoint carries ids and counts only, no job specs or credentials.
#ifndef TESSERA_SERVER_PROMETHEUS_METRICS_H_
#define TESSERA_SERVER_PROMETHEUS_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics_tracker.h"

namespace tessera {

class PrometheusMetrics {
 public:
  // Serves on `listen` (host:port; port 0 picks one). INVALID_ARGUMENT
  // naming --metrics_listen if it cannot listen there.
  static absl::StatusOr<std::unique_ptr<PrometheusMetrics>> Start(const std::string& listen,
                                                                  MetricsSource source);
  ~PrometheusMetrics();

  // host:port actually bound.
  const std::string& address() const { return address_; }

 private:
  struct State;
  PrometheusMetrics() = default;
  std::string address_;
  std::unique_ptr<State> state_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_PROMETHEUS_METRICS_H_

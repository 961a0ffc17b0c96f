// prometheus-cpp adapter for the coordinator's /metrics (see
// prometheus_metrics.h).
#include "server/prometheus_metrics.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/build_info.h"
#include "common/status_macros.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/http_endpoint.h"

namespace tessera {
namespace {

// The Prometheus text exposition format, version 0.0.4.
constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

// Recovery and checkpoint writes take seconds to minutes.
const prometheus::Histogram::BucketBoundaries& SlowSecondsBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
  return *buckets;
}

const prometheus::Histogram::BucketBoundaries& SecondsBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
  return *buckets;
}

// Syncs the tracker into the registry, then renders the registry's
// families. Scrapes may come on several HTTP threads at once.
class CoordinatorCollectable {
 public:
  explicit CoordinatorCollectable(MetricsSource source)
      : tracker_(std::move(source)),
        registry_(std::make_shared<prometheus::Registry>()),
        jobs_(prometheus::BuildGauge()
                  .Name("tessera_jobs")
                  .Help("Jobs known to the coordinator, by state.")
                  .Register(*registry_)),
        workers_(prometheus::BuildGauge()
                     .Name("tessera_workers")
                     .Help("Registered workers, by health.")
                     .Register(*registry_)),
        steps_(prometheus::BuildCounter()
                   .Name("tessera_job_steps_total")
                   .Help("Training steps completed, per job; a step re-run after a restart "
                         "counts once.")
                   .Register(*registry_)),
        tokens_(prometheus::BuildCounter()
                    .Name("tessera_job_tokens_total")
                    .Help("Tokens trained over all ranks, per job (each step once).")
                    .Register(*registry_)),
        repeated_steps_(prometheus::BuildCounter()
                            .Name("tessera_job_repeated_steps_total")
                            .Help("Steps run again after an automatic restart, per job: the "
                                  "work failures cost.")
                            .Register(*registry_)),
        restarts_(prometheus::BuildCounter()
                      .Name("tessera_job_restarts_total")
                      .Help("Automatic restarts, per job (kept across coordinator restarts).")
                      .Register(*registry_)),
        peak_memory_(prometheus::BuildGauge()
                         .Name("tessera_job_peak_memory_bytes")
                         .Help("Peak device memory of a job's fullest rank so far (in use after "
                               "a step), per job.")
                         .Register(*registry_)),
        fp8_saturation_(prometheus::BuildGauge()
                            .Name("tessera_job_fp8_worst_saturation_ratio")
                            .Help("Per job taking FP8 statistics (fp8.stats_interval_steps): the "
                                  "largest fraction of an FP8 tensor's values that saturated at "
                                  "the format's maximum, in the newest statistics record.")
                            .Register(*registry_)),
        fp8_underflow_(prometheus::BuildGauge()
                           .Name("tessera_job_fp8_worst_underflow_ratio")
                           .Help("Per job taking FP8 statistics: the largest fraction of an FP8 "
                                 "tensor's values that underflowed to zero, in the newest "
                                 "statistics record.")
                           .Register(*registry_)),
        slow_rank_slowdown_(prometheus::BuildGauge()
                                .Name("tessera_slow_rank_slowdown_ratio")
                                .Help("Ranks named slow now, per job and worker: how much "
                                      "slower the rank's median compute time per step is than "
                                      "the median rank's over the window (0.25: 25% slower). "
                                      "A series exists only while its rank is named.")
                                .Register(*registry_)),
        heartbeat_age_(prometheus::BuildGauge()
                           .Name("tessera_worker_heartbeat_age_seconds")
                           .Help("Seconds since each registered worker's last heartbeat.")
                           .Register(*registry_)),
        worker_losses_(prometheus::BuildCounter()
                           .Name("tessera_worker_losses_total")
                           .Help("Workers lost (no heartbeat, or unreachable) since the "
                                 "coordinator started.")
                           .Register(*registry_)
                           .Add({})),
        recovery_(prometheus::BuildHistogram()
                      .Name("tessera_recovery_seconds")
                      .Help("From a job's RESTARTING transition to the first step of its next "
                            "attempt.")
                      .Register(*registry_)
                      .Add({}, SlowSecondsBuckets())),
        checkpoint_write_(prometheus::BuildHistogram()
                              .Name("tessera_checkpoint_write_seconds")
                              .Help("From the first rank's Checkpoint call to the commit marker "
                                    "(snapshot, background write, commit), per committed "
                                    "checkpoint.")
                              .Register(*registry_)
                              .Add({}, SlowSecondsBuckets())),
        checkpoints_skipped_(prometheus::BuildCounter()
                                 .Name("tessera_checkpoints_skipped_total")
                                 .Help("Checkpoints skipped because they did not fit on disk "
                                       "(the job trained on).")
                                 .Register(*registry_)
                                 .Add({})),
        preemption_free_(prometheus::BuildHistogram()
                             .Name("tessera_preemption_seconds")
                             .Help("From a preemption's decision to the preempted job's workers "
                                   "being free (its boundary, checkpoint and release), per "
                                   "preempted job.")
                             .Register(*registry_)
                             .Add({}, SlowSecondsBuckets())),
        preemption_steps_redone_(prometheus::BuildCounter()
                                     .Name("tessera_preemption_steps_redone_total")
                                     .Help("Steps preempted jobs run again (those after their "
                                           "newest committed checkpoint).")
                                     .Register(*registry_)
                                     .Add({})),
        step_time_(prometheus::BuildHistogram()
                       .Name("tessera_step_duration_seconds")
                       .Help("Slowest rank's compute time per step.")
                       .Register(*registry_)
                       .Add({}, SecondsBuckets())),
        overhead_(prometheus::BuildHistogram()
                      .Name("tessera_step_control_overhead_seconds")
                      .Help("Time the coordinator adds on top of the slowest rank, per step.")
                      .Register(*registry_)
                      .Add({}, SecondsBuckets())) {
    prometheus::BuildGauge()
        .Name("tessera_build_info")
        .Help("Build information; always 1.")
        .Register(*registry_)
        .Add({{"version", kTesseraVersion},
              {"commit", BuildCommit().empty() ? "unknown" : BuildCommit()},
              {"api", "tessera.v1"}})
        .Set(1);
  }

  std::string Render() {
    absl::MutexLock lock(&mu_);
    MetricsTracker::Snapshot snapshot = tracker_.Sync();
    for (const auto& [state, count] : snapshot.jobs_by_state) {
      jobs_.Add({{"state", state}}).Set(static_cast<double>(count));
    }
    workers_.Add({{"health", "healthy"}}).Set(static_cast<double>(snapshot.workers_healthy));
    workers_.Add({{"health", "unhealthy"}}).Set(static_cast<double>(snapshot.workers_unhealthy));
    for (auto it = per_job_.begin(); it != per_job_.end();) {
      if (snapshot.jobs.count(it->first) == 0) {  // deleted: drop its series
        steps_.Remove(it->second.steps);
        tokens_.Remove(it->second.tokens);
        repeated_steps_.Remove(it->second.repeated_steps);
        restarts_.Remove(it->second.restarts);
        peak_memory_.Remove(it->second.peak_memory);
        if (it->second.fp8_saturation != nullptr) {
          fp8_saturation_.Remove(it->second.fp8_saturation);
          fp8_underflow_.Remove(it->second.fp8_underflow);
        }
        it = per_job_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [job, counters] : snapshot.jobs) {
      JobSeries& series = per_job_[job];
      if (series.steps == nullptr) {
        series.steps = &steps_.Add({{"job", job}});
        series.tokens = &tokens_.Add({{"job", job}});
        series.repeated_steps = &repeated_steps_.Add({{"job", job}});
        series.restarts = &restarts_.Add({{"job", job}});
        series.peak_memory = &peak_memory_.Add({{"job", job}});
      }
      series.peak_memory->Set(static_cast<double>(counters.peak_memory_bytes));
      if (counters.has_fp8_numerics) {  // only jobs that take FP8 statistics
        if (series.fp8_saturation == nullptr) {
          series.fp8_saturation = &fp8_saturation_.Add({{"job", job}});
          series.fp8_underflow = &fp8_underflow_.Add({{"job", job}});
        }
        series.fp8_saturation->Set(counters.fp8_worst_saturation);
        series.fp8_underflow->Set(counters.fp8_worst_underflow);
      }
      series.steps->Increment(static_cast<double>(counters.steps) - series.steps->Value());
      series.tokens->Increment(static_cast<double>(counters.tokens) - series.tokens->Value());
      series.repeated_steps->Increment(static_cast<double>(counters.repeated_steps) -
                                       series.repeated_steps->Value());
      // A job's restart count only grows (it is persisted with the job).
      series.restarts->Increment(
          std::max(0.0, static_cast<double>(counters.restarts) - series.restarts->Value()));
    }
    for (auto it = slow_ranks_.begin(); it != slow_ranks_.end();) {
      if (snapshot.slow_rank_slowdown.count(it->first) == 0) {  // cleared: drop its series
        slow_rank_slowdown_.Remove(it->second);
        it = slow_ranks_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [job_and_worker, slowdown] : snapshot.slow_rank_slowdown) {
      prometheus::Gauge*& gauge = slow_ranks_[job_and_worker];
      if (gauge == nullptr) {
        gauge = &slow_rank_slowdown_.Add(
            {{"job", job_and_worker.first}, {"worker", job_and_worker.second}});
      }
      gauge->Set(slowdown);
    }
    for (auto it = heartbeat_ages_.begin(); it != heartbeat_ages_.end();) {
      if (snapshot.heartbeat_age_s.count(it->first) == 0) {  // gone from the registry
        heartbeat_age_.Remove(it->second);
        it = heartbeat_ages_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [worker, age] : snapshot.heartbeat_age_s) {
      prometheus::Gauge*& gauge = heartbeat_ages_[worker];
      if (gauge == nullptr) gauge = &heartbeat_age_.Add({{"worker", worker}});
      gauge->Set(age);
    }
    worker_losses_.Increment(
        std::max(0.0, static_cast<double>(snapshot.worker_losses) - worker_losses_.Value()));
    for (double s : snapshot.new_recovery_times_s) recovery_.Observe(s);
    for (double s : snapshot.new_checkpoint_writes_s) checkpoint_write_.Observe(s);
    checkpoints_skipped_.Increment(static_cast<double>(snapshot.new_checkpoints_skipped));
    for (double s : snapshot.new_preemption_free_times_s) preemption_free_.Observe(s);
    preemption_steps_redone_.Increment(static_cast<double>(snapshot.new_preemption_steps_redone));
    for (double s : snapshot.new_step_times_s) step_time_.Observe(s);
    for (double s : snapshot.new_control_overheads_s) overhead_.Observe(s);
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

 private:
  struct JobSeries {
    prometheus::Counter* steps = nullptr;
    prometheus::Counter* tokens = nullptr;
    prometheus::Counter* repeated_steps = nullptr;
    prometheus::Counter* restarts = nullptr;
    prometheus::Gauge* peak_memory = nullptr;
    prometheus::Gauge* fp8_saturation = nullptr;  // set once the job has FP8 statistics
    prometheus::Gauge* fp8_underflow = nullptr;
  };
  absl::Mutex mu_;
  MetricsTracker tracker_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& repeated_steps_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Gauge>& peak_memory_;
  prometheus::Family<prometheus::Gauge>& fp8_saturation_;
  prometheus::Family<prometheus::Gauge>& fp8_underflow_;
  prometheus::Family<prometheus::Gauge>& slow_rank_slowdown_;
  prometheus::Family<prometheus::Gauge>& heartbeat_age_;
  prometheus::Counter& worker_losses_;
  prometheus::Histogram& recovery_;
  prometheus::Histogram& checkpoint_write_;
  prometheus::Counter& checkpoints_skipped_;
  prometheus::Histogram& preemption_free_;
  prometheus::Counter& preemption_steps_redone_;
  prometheus::Histogram& step_time_;
  prometheus::Histogram& overhead_;
  std::map<std::string, JobSeries> per_job_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> heartbeat_ages_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> slow_ranks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct PrometheusMetrics::State {
  std::unique_ptr<CoordinatorCollectable> collectable;
  std::unique_ptr<HttpEndpoint> endpoint;  // destroyed first: no scrape outlives the registry
};

absl::StatusOr<std::unique_ptr<PrometheusMetrics>> PrometheusMetrics::Start(
    const std::string& listen, MetricsSource source) {
  std::unique_ptr<PrometheusMetrics> out(new PrometheusMetrics());
  out->state_ = std::make_unique<State>();
  out->state_->collectable = std::make_unique<CoordinatorCollectable>(std::move(source));
  CoordinatorCollectable* collectable = out->state_->collectable.get();
  ASSIGN_OR_RETURN(
      out->state_->endpoint,
      HttpEndpoint::Start("--metrics_listen", listen,
                          {{"/metrics", [collectable](const std::vector<std::string>&) {
                              HttpResponse response;
                              response.content_type = kTextFormat;
                              response.body = collectable->Render();
                              return response;
                            }}}));
  out->address_ = out->state_->endpoint->address();
  return out;
}

PrometheusMetrics::~PrometheusMetrics() = default;

}  // namespace tessera

// See status_page.h.
#include "server/status_page.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fp8_numerics.h"
#include "common/status_macros.h"
#include "common/step_history.h"
#include "nlohmann/json.hpp"
#include "server/status_page_assets.h"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;

// The page may run only this origin's script and fetch only from it.
constexpr char kContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

HttpResponse Json200(const std::string& body) {
  HttpResponse r;
  r.content_type = "application/json";
  r.body = body;
  return r;
}

HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = Json{{"error", message}}.dump();
  return r;
}

int HttpStatusFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// Non-finite losses (a diverged job) are JSON null, which the chart skips.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace

std::string StatusPageJobsJson(const std::vector<v1::Job>& all_jobs,
                               const std::vector<v1::WorkerRecord>& workers, absl::Time now) {
  std::vector<const v1::Job*> jobs;
  for (const v1::Job& j : all_jobs) jobs.push_back(&j);
  std::sort(jobs.begin(), jobs.end(), [](const v1::Job* a, const v1::Job* b) {
    return a->create_time_unix_ms() != b->create_time_unix_ms()
               ? a->create_time_unix_ms() > b->create_time_unix_ms()
               : a->id() > b->id();
  });
  if (jobs.size() > static_cast<size_t>(kMaxListedJobs)) jobs.resize(kMaxListedJobs);
  Json out = Json::object();
  out["time_unix_ms"] = absl::ToUnixMillis(now);
  out["jobs"] = Json::array();
  for (const v1::Job* j : jobs) {
    const bool has_metrics = j->steps_done() > 0;
    out["jobs"].push_back({{"id", j->id()},
                           {"name", j->spec().name()},
                           {"state", v1::JobState_Name(j->state())},
                           {"reason", j->reason()},
                           {"world_size", j->spec().world_size()},
                           {"device_kind", v1::DeviceKind_Name(j->spec().device_kind())},
                           {"steps", j->spec().steps()},
                           {"steps_done", j->steps_done()},
                           {"restarts", j->restarts()},
                           {"loss", has_metrics ? Number(j->last_metrics().loss()) : Json(nullptr)},
                           {"tokens_per_s", has_metrics ? Number(j->last_metrics().tokens_per_s())
                                                        : Json(nullptr)},
                           {"mfu", has_metrics ? Number(j->last_metrics().mfu()) : Json(nullptr)},
                           {"create_time_unix_ms", j->create_time_unix_ms()},
                           {"start_time_unix_ms", j->start_time_unix_ms()},
                           {"end_time_unix_ms", j->end_time_unix_ms()}});
  }
  out["workers"] = Json::array();
  for (const v1::WorkerRecord& w : workers) {
    const double age_s =
        w.last_heartbeat_unix_ms() > 0
            ? std::max<double>(0, (absl::ToUnixMillis(now) - w.last_heartbeat_unix_ms()) / 1000.0)
            : -1;
    out["workers"].push_back({{"id", w.worker_id()},
                              {"address", w.address()},
                              {"device", w.device().name()},
                              {"device_kind", v1::DeviceKind_Name(w.device().kind())},
                              {"host", w.device().host()},
                              {"healthy", w.healthy()},
                              {"health_reason", w.health_reason()},
                              {"job_id", w.job_id()},
                              {"heartbeat_age_s", age_s}});
  }
  return out.dump();
}

std::string StatusPageStepsJson(const v1::Job& job, const std::vector<v1::JobEvent>& events) {
  StepHistory history;
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) history.Add(e.step());
  }
  const std::map<int, v1::StepMetrics>& steps = history.steps();
  const int64_t count = static_cast<int64_t>(steps.size());
  const int64_t stride = count <= kMaxChartPoints ? 1 : (count + kMaxChartPoints - 1) / kMaxChartPoints;
  Json train = Json::array(), validation = Json::array();
  int64_t i = 0;
  for (const auto& [step, m] : steps) {
    // Validation points are rare; every one is kept.
    if (m.has_validation()) validation.push_back({step, Number(m.validation().loss())});
    if (i % stride == 0 || i == count - 1) train.push_back({step, Number(m.loss())});
    ++i;
  }
  // The newest FP8 statistics record's worst tensors (null without one).
  Json numerics = nullptr;
  if (job.has_last_numerics()) {
    Json tensors = Json::array();
    for (const v1::Fp8TensorStats& t : WorstFp8Tensors(job.last_numerics(), kMaxNumericsRows)) {
      tensors.push_back({{"name", Fp8TensorName(t)},
                         {"format", t.format()},
                         {"amax", Number(t.amax())},
                         {"scale", Number(t.scale())},
                         {"saturated", Number(t.saturated_fraction())},
                         {"underflow", Number(t.underflow_fraction())}});
    }
    numerics = {{"step", job.last_numerics().step()},
                {"count", job.last_numerics().tensors_size()},
                {"tensors", std::move(tensors)}};
  }
  Json out = {{"id", job.id()},
              {"name", job.spec().name()},
              {"state", v1::JobState_Name(job.state())},
              {"steps", job.spec().steps()},
              {"steps_done", job.steps_done()},
              {"stride", stride},
              {"train", std::move(train)},
              {"validation", std::move(validation)},
              {"numerics", std::move(numerics)}};
  return out.dump();
}

std::vector<HttpRoute> StatusPageRoutes(MetricsSource source) {
  auto asset = [](const char* content_type, const char* body) {
    return [content_type, body](const std::vector<std::string>&) {
      HttpResponse r;
      r.content_type = content_type;
      r.body = body;
      r.headers["Content-Security-Policy"] = kContentSecurityPolicy;
      return r;
    };
  };
  std::vector<HttpRoute> routes;
  routes.push_back({"/", asset("text/html; charset=utf-8", kStatusPageHtml)});
  routes.push_back({"/status.js", asset("text/javascript; charset=utf-8", kStatusPageScript)});
  routes.push_back({"/api/jobs", [source](const std::vector<std::string>&) {
                      absl::StatusOr<std::vector<v1::Job>> jobs = source.list_jobs();
                      if (!jobs.ok()) return JsonError(HttpStatusFor(jobs.status()), std::string(jobs.status().message()));
                      return Json200(StatusPageJobsJson(*jobs, source.list_workers(), source.now()));
                    }});
  routes.push_back({"/api/jobs/([^/]+)/steps", [source](const std::vector<std::string>& captures) {
                      const std::string& id = captures.at(0);
                      absl::StatusOr<std::shared_ptr<EventLog>> log = source.job_events(id);
                      if (!log.ok()) return JsonError(HttpStatusFor(log.status()), std::string(log.status().message()));
                      // The job record after its events: steps_done is then
                      // at least what the events show.
                      std::vector<v1::JobEvent> events;
                      for (int64_t cursor = 0;;) {
                        EventLog::Batch batch = (*log)->Read(cursor, 0, absl::ZeroDuration());
                        if (batch.events.empty() || batch.next_cursor <= cursor) break;
                        for (v1::JobEvent& e : batch.events) events.push_back(std::move(e));
                        cursor = batch.next_cursor;
                      }
                      absl::StatusOr<v1::Job> job = source.get_job(id);
                      if (!job.ok()) return JsonError(HttpStatusFor(job.status()), std::string(job.status().message()));
                      return Json200(StatusPageStepsJson(*job, events));
                    }});
  return routes;
}

absl::StatusOr<std::unique_ptr<StatusPage>> StatusPage::Start(const std::string& listen,
                                                              MetricsSource source) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<HttpEndpoint> endpoint,
      HttpEndpoint::Start("--web_listen", listen, StatusPageRoutes(std::move(source))));
  return std::unique_ptr<StatusPage>(new StatusPage(std::move(endpoint)));
}

}  // namespace tessera

// The status page: its JSON bodies (one chart point per step under the
// restart rule, validation points, a stride beyond kMaxChartPoints, null
// for a non-finite loss, newest jobs first and at most kMaxListedJobs), and
// its routes over a real coordinator: the page and script with their
// Content-Security-Policy, /api/jobs, a job's steps, 404 for an unknown job
// or path and 400 for a malformed id. The page in a browser is
// tests/status_page_browser_test.
#include "server/status_page.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

v1::JobEvent Step(int step, float loss, int attempt = 0, float validation = -1) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(loss);
  e.mutable_step()->set_attempt(attempt);
  if (validation >= 0) e.mutable_step()->mutable_validation()->set_loss(validation);
  return e;
}

v1::Job JobWithSteps(int steps) {
  v1::Job job;
  job.set_id("job-7");
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->set_steps(steps);
  job.set_state(v1::RUNNING);
  return job;
}

TEST(StatusPage, OnePointPerStepTheLatestAttemptsWithValidation) {
  // Attempt 0 ran steps 0-3, attempt 1 resumed at step 2 and ran 2-4.
  std::vector<v1::JobEvent> events = {Step(0, 5.0f),       Step(1, 4.0f, 0, 4.5f),
                                      Step(2, 3.9f),       Step(3, 3.8f, 0, 3.95f),
                                      Step(2, 3.5f, 1),    Step(3, 3.4f, 1, 3.6f),
                                      Step(4, NAN, 1)};
  const nlohmann::json out = nlohmann::json::parse(StatusPageStepsJson(JobWithSteps(10), events));
  EXPECT_EQ(out["id"], "job-7");
  EXPECT_EQ(out["state"], "RUNNING");
  EXPECT_EQ(out["steps"], 10);
  EXPECT_EQ(out["stride"], 1);
  ASSERT_EQ(out["train"].size(), 5u);
  EXPECT_EQ(out["train"][2][0], 2);
  EXPECT_FLOAT_EQ(out["train"][2][1].get<float>(), 3.5f);
  EXPECT_FLOAT_EQ(out["train"][3][1].get<float>(), 3.4f);
  EXPECT_TRUE(out["train"][4][1].is_null());  // NaN
  ASSERT_EQ(out["validation"].size(), 2u);
  EXPECT_EQ(out["validation"][1][0], 3);
  EXPECT_FLOAT_EQ(out["validation"][1][1].get<float>(), 3.6f);
}

// The numerics panel: the newest FP8 record's worst tensors, at most
// kMaxNumericsRows, worst first; null for a job without one.
TEST(StatusPage, NumericsAreTheNewestRecordsWorstTensors) {
  v1::Job job = JobWithSteps(10);
  EXPECT_TRUE(nlohmann::json::parse(StatusPageStepsJson(job, {}))["numerics"].is_null());
  v1::Fp8Numerics* n = job.mutable_last_numerics();
  n->set_step(6);
  for (int b = 0; b < kMaxNumericsRows + 4; ++b) {
    v1::Fp8TensorStats* t = n->add_tensors();
    t->set_block(b);
    t->set_linear("down");
    t->set_role(v1::Fp8TensorStats::INPUT);
    t->set_format("e4m3");
    t->set_amax(2.f);
    t->set_scale(224.f);
    t->set_saturated_fraction(0.001 * b);
  }
  const nlohmann::json out = nlohmann::json::parse(StatusPageStepsJson(job, {}));
  EXPECT_EQ(out["numerics"]["step"], 6);
  EXPECT_EQ(out["numerics"]["count"], kMaxNumericsRows + 4);
  ASSERT_EQ(out["numerics"]["tensors"].size(), static_cast<size_t>(kMaxNumericsRows));
  EXPECT_EQ(out["numerics"]["tensors"][0]["name"], "block 11 down input");
  EXPECT_FLOAT_EQ(out["numerics"]["tensors"][0]["saturated"].get<float>(), 0.011f);
  EXPECT_EQ(out["numerics"]["tensors"][0]["format"], "e4m3");
}

TEST(StatusPage, LongJobsAreThinnedToTheChartsLimitKeepingTheLastStep) {
  const int steps = 3 * kMaxChartPoints + 7;
  std::vector<v1::JobEvent> events;
  for (int s = 0; s < steps; ++s) events.push_back(Step(s, 10.0f - s * 1e-4f, 0, s == 5 ? 1.0f : -1));
  const nlohmann::json out = nlohmann::json::parse(StatusPageStepsJson(JobWithSteps(steps), events));
  EXPECT_EQ(out["stride"], 4);
  EXPECT_LE(out["train"].size(), static_cast<size_t>(kMaxChartPoints) + 1);
  EXPECT_EQ(out["train"][0][0], 0);
  EXPECT_EQ(out["train"][1][0], 4);
  EXPECT_EQ(out["train"].back()[0], steps - 1);
  EXPECT_EQ(out["validation"].size(), 1u);  // never thinned
}

TEST(StatusPage, JobsNewestFirstAndBounded) {
  std::vector<v1::Job> jobs(kMaxListedJobs + 20);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].set_id("job-" + std::to_string(i + 1));
    jobs[i].set_create_time_unix_ms(1000 + static_cast<int64_t>(i));
    jobs[i].set_state(v1::SUCCEEDED);
  }
  jobs[3].set_steps_done(4);
  jobs[3].mutable_last_metrics()->set_loss(2.5f);
  v1::WorkerRecord w;
  w.set_worker_id("w1");
  w.set_healthy(true);
  w.set_last_heartbeat_unix_ms(absl::ToUnixMillis(absl::FromUnixMillis(10'000)));
  const nlohmann::json out =
      nlohmann::json::parse(StatusPageJobsJson(jobs, {w}, absl::FromUnixMillis(12'500)));
  ASSERT_EQ(out["jobs"].size(), static_cast<size_t>(kMaxListedJobs));
  EXPECT_EQ(out["jobs"][0]["id"], "job-" + std::to_string(jobs.size()));
  EXPECT_TRUE(out["jobs"][0]["loss"].is_null());  // no steps yet
  const nlohmann::json& fourth = out["jobs"][kMaxListedJobs - 1];
  EXPECT_EQ(fourth["id"], "job-21");
  EXPECT_DOUBLE_EQ(out["workers"][0]["heartbeat_age_s"].get<double>(), 2.5);
  // job-4 has a loss; it is past the newest 500, so look it up by building
  // the list from it alone.
  const nlohmann::json one = nlohmann::json::parse(StatusPageJobsJson({jobs[3]}, {}, absl::Now()));
  EXPECT_FLOAT_EQ(one["jobs"][0]["loss"].get<float>(), 2.5f);
  EXPECT_EQ(one["jobs"][0]["steps_done"], 4);
}

TEST(StatusPage, RoutesServeThePageAndTheCoordinatorsState) {
  CoordinatorOptions options;
  options.start_background_thread = false;
  options.connect = FakeWorkerConnector();
  Coordinator core(options);
  ASSERT_TRUE(core.Start().ok());
  v1::JobSpec spec = TinyJobSpec(1, 3);
  spec.set_name("<b>not markup</b>");
  ASSERT_TRUE(core.SubmitJob(spec).ok());

  MetricsSource source;
  source.list_jobs = [&core]() -> absl::StatusOr<std::vector<v1::Job>> {
    return core.ListJobs({}, 1000, "")->jobs;
  };
  source.list_workers = [&core] { return core.ListWorkers(); };
  source.job_events = [&core](const std::string& id) { return core.JobEvents(id); };
  source.get_job = [&core](const std::string& id) { return core.GetJob(id); };
  absl::StatusOr<std::unique_ptr<StatusPage>> page = StatusPage::Start("127.0.0.1:0", source);
  ASSERT_TRUE(page.ok()) << page.status();
  const std::string address = (*page)->address();
  httplib::Client http(address.substr(0, address.rfind(':')),
                       std::stoi(address.substr(address.rfind(':') + 1)));

  auto index = http.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->body.find("<canvas id=\"loss-chart\""), std::string::npos);
  EXPECT_NE(index->body.find("<script src=\"/status.js\">"), std::string::npos);
  EXPECT_EQ(index->body.find("http://"), std::string::npos);  // nothing from elsewhere
  EXPECT_EQ(index->body.find("https://"), std::string::npos);
  EXPECT_NE(index->get_header_value("Content-Security-Policy").find("script-src 'self'"),
            std::string::npos);
  EXPECT_EQ(index->get_header_value("Cache-Control"), "no-store");
  auto script = http.Get("/status.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_NE(script->get_header_value("Content-Type").find("text/javascript"), std::string::npos);
  EXPECT_EQ(script->body.find("innerHTML"), std::string::npos);  // values are set as text

  auto jobs = http.Get("/api/jobs");
  ASSERT_TRUE(jobs);
  ASSERT_EQ(jobs->status, 200);
  const nlohmann::json listed = nlohmann::json::parse(jobs->body);
  ASSERT_EQ(listed["jobs"].size(), 1u);
  EXPECT_EQ(listed["jobs"][0]["id"], "job-1");
  EXPECT_EQ(listed["jobs"][0]["name"], "<b>not markup</b>");  // JSON text, escaped by the page
  EXPECT_EQ(listed["jobs"][0]["state"], "PENDING");

  auto steps = http.Get("/api/jobs/job-1/steps");
  ASSERT_TRUE(steps);
  ASSERT_EQ(steps->status, 200);
  EXPECT_TRUE(nlohmann::json::parse(steps->body)["train"].empty());
  auto unknown = http.Get("/api/jobs/job-99/steps");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(nlohmann::json::parse(unknown->body).contains("error"));
  auto malformed = http.Get("/api/jobs/" + std::string(300, 'j') + "/steps");  // id too long
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  auto nothing = http.Get("/etc/passwd");
  ASSERT_TRUE(nothing);
  EXPECT_EQ(nothing->status, 404);
}

TEST(StatusPage, AnAddressItCannotListenOnNamesTheFlag) {
  absl::StatusOr<std::unique_ptr<StatusPage>> page = StatusPage::Start("nonsense", MetricsSource{});
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(page.status().message().find("--web_listen"), std::string::npos);
}

}  // namespace
}  // namespace tessera

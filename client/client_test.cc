// CoordinatorClient against an in-process fake Coordinator on 127.0.0.1:0:
// deadlines, retries with backoff, which calls are not retried, a clean
// UNAVAILABLE for an unreachable address, and WatchJob re-subscribing from
// the last step without delivering an event twice.
#include "client/client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/fake_coordinator.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using google::protobuf::util::MessageDifferencer;

ClientOptions FastOptions() {
  ClientOptions options;
  options.call_timeout = absl::Seconds(5);
  options.max_attempts = 4;
  options.initial_backoff = absl::Milliseconds(40);
  options.max_backoff = absl::Milliseconds(200);
  return options;
}

grpc::Status Unavailable() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "try again"); }

// A port nothing listens on: bound once, then released.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

v1::Job RandomJob(std::mt19937& rng, const std::string& id, int steps) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_name(absl::StrCat("run-", rng() % 100000));
  job.mutable_spec()->set_steps(steps);
  job.mutable_spec()->mutable_model()->set_d_model(16 * (1 + static_cast<int>(rng() % 32)));
  job.set_state(v1::RUNNING);
  job.set_steps_done(static_cast<int>(rng() % steps));
  job.mutable_last_metrics()->set_loss(std::uniform_real_distribution<float>(0.5f, 5.f)(rng));
  return job;
}

v1::JobEvent StateEvent(v1::JobState state, const std::string& reason) {
  v1::JobEvent e;
  e.mutable_state_change()->set_state(state);
  e.mutable_state_change()->set_reason(reason);
  return e;
}

v1::JobEvent StepEvent(int step, float loss) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(loss);
  return e;
}

class ClientTest : public ::testing::Test {
 protected:
  std::mt19937 rng_{std::random_device{}()};
  FakeCoordinator server_;
};

TEST_F(ClientTest, UnaryCallsReturnTheServersAnswers) {
  v1::Job job = RandomJob(rng_, "job-7", 50);
  server_.AddJob(job, {});
  v1::WorkerRecord worker;
  worker.set_worker_id(absl::StrCat("w-", rng_() % 100));
  worker.set_healthy(true);
  server_.AddWorker(worker);
  CoordinatorClient client(server_.address(), FastOptions());

  auto got = client.GetJob("job-7");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*got, job));

  v1::JobSpec spec;
  spec.set_name("fresh");
  spec.mutable_model()->set_d_model(64 + static_cast<int>(rng_() % 64));
  auto submitted = client.SubmitJob(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->state(), v1::PENDING);
  EXPECT_EQ(submitted->spec().model().d_model(), spec.model().d_model());

  auto jobs = client.ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id(), submitted->id());  // newest first
  auto pending = client.ListJobs({v1::PENDING});
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->size(), 1u);

  auto cancelled = client.CancelJob("job-7", "no longer needed");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->reason(), "no longer needed");

  auto workers = client.ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].worker_id(), worker.worker_id());
}

TEST_F(ClientTest, DeadlineIsHonouredAndNotRetried) {
  server_.AddJob(RandomJob(rng_, "job-1", 10), {});
  server_.SetGetJobDelay(absl::Seconds(5));
  ClientOptions options = FastOptions();
  options.call_timeout = absl::Milliseconds(300);
  CoordinatorClient client(server_.address(), options);
  const absl::Time start = absl::Now();
  auto got = client.GetJob("job-1");
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_FALSE(IsCoordinatorUnreachable(got.status()));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(2));  // well before the server's 5 s answer
  EXPECT_EQ(server_.calls("GetJob"), 1);
}

TEST_F(ClientTest, UnavailableIsRetriedWithBackoffThenSucceeds) {
  server_.AddJob(RandomJob(rng_, "job-2", 10), {});
  server_.FailNext("GetJob", {Unavailable(), Unavailable()});
  ClientOptions options = FastOptions();
  CoordinatorClient client(server_.address(), options);
  auto got = client.GetJob("job-2");
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<absl::Time> times = server_.call_times("GetJob");
  ASSERT_EQ(times.size(), 3u);
  // Jitter is in [0.5, 1.5) of a backoff that doubles: 40 ms, then 80 ms.
  EXPECT_GE(times[1] - times[0], absl::Milliseconds(20));
  EXPECT_GE(times[2] - times[1], absl::Milliseconds(40));
}

TEST_F(ClientTest, RetriesStopAfterMaxAttempts) {
  server_.FailNext("ListJobs", std::vector<grpc::Status>(10, Unavailable()));
  ClientOptions options = FastOptions();
  options.max_attempts = 3;
  CoordinatorClient client(server_.address(), options);
  auto jobs = client.ListJobs();
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kUnavailable);
  // The coordinator answered: this is its error, not a connection failure.
  EXPECT_FALSE(IsCoordinatorUnreachable(jobs.status())) << jobs.status();
  EXPECT_EQ(server_.calls("ListJobs"), 3);
}

TEST_F(ClientTest, CancelAndListWorkersAreRetried) {
  server_.AddJob(RandomJob(rng_, "job-3", 10), {});
  server_.FailNext("CancelJob", {Unavailable()});
  server_.FailNext("ListWorkers", {Unavailable(), Unavailable()});
  CoordinatorClient client(server_.address(), FastOptions());
  EXPECT_TRUE(client.CancelJob("job-3").ok());
  EXPECT_EQ(server_.calls("CancelJob"), 2);
  EXPECT_TRUE(client.ListWorkers().ok());
  EXPECT_EQ(server_.calls("ListWorkers"), 3);
}

TEST_F(ClientTest, NotFoundIsNotRetried) {
  CoordinatorClient client(server_.address(), FastOptions());
  auto got = client.GetJob("job-404");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("job-404"), absl::string_view::npos);
  EXPECT_EQ(server_.calls("GetJob"), 1);
}

TEST_F(ClientTest, SubmitIsNotRetriedOnceTheRequestWasSent) {
  server_.FailNext("SubmitJob", {Unavailable()});
  CoordinatorClient client(server_.address(), FastOptions());
  v1::JobSpec spec;
  spec.mutable_model()->set_d_model(32);
  auto job = client.SubmitJob(spec);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server_.calls("SubmitJob"), 1);
  EXPECT_TRUE(server_.submitted().empty());
}

TEST_F(ClientTest, ServerValidationErrorsArePassedThrough) {
  CoordinatorClient client(server_.address(), FastOptions());
  auto job = client.SubmitJob(v1::JobSpec());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "model.d_model: must be >= 1");
}

TEST(ClientUnreachableTest, UnreachableAddressFailsQuicklyAndCleanly) {
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  CoordinatorClient client(address, FastOptions());
  for (int call = 0; call < 3; ++call) {
    const absl::Time start = absl::Now();
    absl::Status status;
    if (call == 0) status = client.GetJob("job-1").status();
    if (call == 1) status = client.SubmitJob(v1::JobSpec()).status();
    if (call == 2) status = client.WatchJob("job-1", 0, [](const v1::JobEvent&) { return true; });
    EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << call;
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_TRUE(IsCoordinatorUnreachable(status)) << status;
    EXPECT_EQ(std::string(status.message()),
              absl::StrCat("cannot reach coordinator at ", address, " (connection refused)"));
  }
}

class WatchTest : public ClientTest {
 protected:
  void SetUp() override {
    std::vector<v1::JobEvent> events = {StateEvent(v1::RUNNING, "started")};
    for (int s = 0; s < 5; ++s) {
      losses_.push_back(std::uniform_real_distribution<float>(1.f, 4.f)(rng_));
      events.push_back(StepEvent(s, losses_.back()));
    }
    events.push_back(StateEvent(v1::SUCCEEDED, "completed 5 steps"));
    server_.AddJob(RandomJob(rng_, "job-9", 5), events);
  }
  std::vector<float> losses_;
};

TEST_F(WatchTest, ResubscribesAfterTheLastEventWithoutDuplicates) {
  server_.BreakFirstWatchAfter(3);  // RUNNING, step 0, step 1, then UNAVAILABLE
  CoordinatorClient client(server_.address(), FastOptions());
  std::vector<v1::JobEvent> seen;
  absl::Status status = client.WatchJob("job-9", 0, [&](const v1::JobEvent& e) {
    seen.push_back(e);
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  // The second subscription continues after the third event (sequence 3).
  EXPECT_EQ(server_.watch_from_steps(), (std::vector<int>{0, 0}));
  EXPECT_EQ(server_.watch_after_sequences(), (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0].state_change().state(), v1::RUNNING);
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE(seen[1 + s].has_step()) << s;
    EXPECT_EQ(seen[1 + s].step().step(), s);
    EXPECT_FLOAT_EQ(seen[1 + s].step().loss(), losses_[s]);
  }
  EXPECT_EQ(seen[6].state_change().state(), v1::SUCCEEDED);
}

TEST_F(ClientTest, AResubscriptionKeepsStepsARestartedAttemptReportedAgain) {
  // Attempt 0 reports steps 0-2 and fails; attempt 1 resumes from the
  // checkpoint of step 1 and reports steps 1-2 again. The stream breaks
  // after attempt 0's step 2: resuming "from step 3" would lose attempt 1's
  // records of steps 1 and 2.
  std::vector<v1::JobEvent> events = {StateEvent(v1::RUNNING, "training")};
  for (int s = 0; s < 3; ++s) events.push_back(StepEvent(s, 3.f - s));
  events.push_back(StateEvent(v1::RESTARTING, "restart 1 of 1"));
  events.push_back(StateEvent(v1::STARTING, "attempt 2"));
  events.push_back(StateEvent(v1::RUNNING, "training"));
  for (int s = 1; s < 4; ++s) {
    v1::JobEvent e = StepEvent(s, 2.5f - s);
    e.mutable_step()->set_attempt(1);
    events.push_back(e);
  }
  events.push_back(StateEvent(v1::SUCCEEDED, "completed 4 steps"));
  server_.AddJob(RandomJob(rng_, "job-3", 4), events);
  server_.BreakFirstWatchAfter(4);
  CoordinatorClient client(server_.address(), FastOptions());
  std::vector<std::pair<int, int>> steps;  // (step, attempt)
  absl::Status status = client.WatchJob("job-3", 0, [&](const v1::JobEvent& e) {
    if (e.has_step()) steps.emplace_back(e.step().step(), e.step().attempt());
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(steps, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {1, 1}, {2, 1},
                                                     {3, 1}}));
}

TEST_F(WatchTest, FromStepSkipsEarlierSteps) {
  CoordinatorClient client(server_.address(), FastOptions());
  std::vector<int> steps;
  absl::Status status = client.WatchJob("job-9", 3, [&](const v1::JobEvent& e) {
    if (e.has_step()) steps.push_back(e.step().step());
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(steps, (std::vector<int>{3, 4}));
}

TEST_F(WatchTest, CallbackCanStopTheWatch) {
  CoordinatorClient client(server_.address(), FastOptions());
  int seen = 0;
  absl::Status status = client.WatchJob("job-9", 0, [&](const v1::JobEvent&) {
    return ++seen < 2;
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, 2);
}

TEST_F(WatchTest, UnknownJobIsNotFoundAndNotRetried) {
  CoordinatorClient client(server_.address(), FastOptions());
  absl::Status status = client.WatchJob("job-404", 0, [](const v1::JobEvent&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_.calls("WatchJob"), 1);
}

TEST_F(ClientTest, ListJobsFollowsEveryPage) {
  // 250 jobs take three pages of the coordinator's default 100.
  for (int i = 1; i <= 250; ++i) server_.AddJob(RandomJob(rng_, absl::StrCat("job-", i), 5), {});
  CoordinatorClient client(server_.address(), FastOptions());
  auto jobs = client.ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 250u);
  for (int i = 0; i < 250; ++i) EXPECT_EQ((*jobs)[i].id(), absl::StrCat("job-", 250 - i));
  EXPECT_EQ(server_.calls("ListJobs"), 3);

  auto page = client.ListJobsPage({}, 7, "");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs_size(), 7);
  EXPECT_FALSE(page->next_page_token().empty());
  auto next = client.ListJobsPage({}, 7, page->next_page_token());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->jobs(0).id(), "job-243");

  // A page that fails mid-way is retried like any other call.
  server_.FailNext("ListJobs", {Unavailable()});
  EXPECT_EQ(client.ListJobs()->size(), 250u);
}

TEST_F(ClientTest, DeleteJobIsSentOnceAndReportsTheServersRefusals) {
  v1::Job done = RandomJob(rng_, "job-1", 5);
  done.set_state(v1::SUCCEEDED);
  v1::Job running = RandomJob(rng_, "job-2", 5);
  running.set_state(v1::RUNNING);
  server_.AddJob(done, {});
  server_.AddJob(running, {});
  CoordinatorClient client(server_.address(), FastOptions());
  EXPECT_TRUE(client.DeleteJob("job-1").ok());
  EXPECT_EQ(client.DeleteJob("job-1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.DeleteJob("job-2").code(), absl::StatusCode::kFailedPrecondition);
  server_.FailNext("DeleteJob", {Unavailable()});
  EXPECT_EQ(client.DeleteJob("job-2").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server_.calls("DeleteJob"), 4);
  auto left = client.ListJobs();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id(), "job-2");
}

TEST_F(ClientTest, CheckpointSuspendAndResumeAreSentOnceAndReportTheServersRefusals) {
  v1::Job running = RandomJob(rng_, "job-1", 50);
  running.set_state(v1::RUNNING);
  running.set_steps_done(20);
  server_.AddJob(running, {});
  CoordinatorClient client(server_.address(), FastOptions());
  absl::StatusOr<v1::Job> asked = client.CheckpointJob("job-1");
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::RUNNING);
  EXPECT_EQ(client.ResumeJob("job-1").status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<v1::Job> suspending = client.SuspendJob("job-1", "maintenance");
  ASSERT_TRUE(suspending.ok()) << suspending.status();
  EXPECT_EQ(client.GetJob("job-1")->state(), v1::SUSPENDED);
  EXPECT_EQ(client.SuspendJob("job-1").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.CheckpointJob("job-9").status().code(), absl::StatusCode::kNotFound);
  // A lost answer is not sent again: a repeated resume would be refused
  // for the state the first one caused.
  server_.FailNext("ResumeJob", {Unavailable()});
  EXPECT_EQ(client.ResumeJob("job-1").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server_.calls("ResumeJob"), 2);
  absl::StatusOr<v1::Job> resumed = client.ResumeJob("job-1");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), v1::PENDING);
}

}  // namespace
}  // namespace tessera

// Registration against a fake WorkerRegistry over loopback: it registers
// with the worker's address and device, heartbeats at the coordinator's
// interval carrying health, registers again when a heartbeat answers
// NOT_FOUND (coordinator restarted), keeps retrying while the coordinator is
// absent, and Stop() ends it promptly with no heartbeat after. Registration
// and heartbeats carry the worker's activity, and the jobs the coordinator
// says to abort reach on_abort. A stopping worker's heartbeat goes out at
// once and returns the coordinator's answer, and every later heartbeat
// says it is stopping and unhealthy.
#include "worker/daemon/registration.h"

#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_worker_registry.h"
#include "worker/daemon/loopback_server_for_test.h"

namespace tessera {
namespace {

constexpr int kIntervalMs = 50;

struct HealthSource {
  absl::Mutex mu;
  Registration::Health health;
  Registration::Health Get() {
    absl::MutexLock lock(&mu);
    return health;
  }
};

struct Ids {
  absl::Mutex mu;
  std::vector<std::string> seen;
  void Add(const std::string& id) {
    absl::MutexLock lock(&mu);
    seen.push_back(id);
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu);
    return seen;
  }
};

v1::RegisterWorkerRequest RandomRequest() {
  std::mt19937 rng(std::random_device{}());
  v1::RegisterWorkerRequest request;
  request.set_address(absl::StrCat("127.0.0.1:", 20000 + rng() % 20000));
  request.mutable_device()->set_kind(v1::CPU);
  request.mutable_device()->set_name(absl::StrCat("cpu (", 1 + rng() % 64, " cores)"));
  request.mutable_device()->set_memory_bytes(static_cast<int64_t>(1 + rng() % 1000) << 20);
  return request;
}

TEST(Registration, RegistersThenHeartbeatsCarryingHealth) {
  FakeWorkerRegistry registry(kIntervalMs);
  LoopbackServer server = StartLoopbackServer({&registry});
  ASSERT_NE(server.server, nullptr);
  HealthSource health;
  Ids ids;
  const v1::RegisterWorkerRequest request = RandomRequest();
  Registration registration(
      server.address(), request, [&] { return health.Get(); },
      [&](const std::string& id) { ids.Add(id); });
  EXPECT_EQ(registration.worker_id(), "");
  registration.Start();

  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return r.heartbeats >= 3; }, absl::Seconds(5)));
  FakeWorkerRegistry::Record record = registry.record();
  EXPECT_EQ(record.registrations, 1);
  EXPECT_EQ(record.last_registration.address(), request.address());
  EXPECT_EQ(record.last_registration.device().name(), request.device().name());
  EXPECT_EQ(record.last_registration.device().memory_bytes(), request.device().memory_bytes());
  EXPECT_EQ(record.last_heartbeat.worker_id(), record.last_id);
  EXPECT_EQ(record.last_heartbeat.address(), request.address());
  EXPECT_TRUE(record.last_heartbeat.healthy());
  EXPECT_EQ(registration.worker_id(), record.last_id);
  EXPECT_EQ(ids.Get(), std::vector<std::string>{record.last_id});

  {
    absl::MutexLock lock(&health.mu);
    health.health = {false, "INTERNAL: sticky CUDA error"};
  }
  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return !r.last_heartbeat.healthy(); },
                               absl::Seconds(5)));
  EXPECT_EQ(registry.record().last_heartbeat.health_reason(), "INTERNAL: sticky CUDA error");

  const absl::Time start = absl::Now();
  registration.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  const int after_stop = registry.record().heartbeats;
  absl::SleepFor(absl::Milliseconds(4 * kIntervalMs));
  EXPECT_EQ(registry.record().heartbeats, after_stop);
  registration.Stop();  // idempotent
  server.server->Shutdown();
}

TEST(Registration, RegistersAgainWhenHeartbeatIsNotFound) {
  FakeWorkerRegistry registry(kIntervalMs);
  LoopbackServer server = StartLoopbackServer({&registry});
  ASSERT_NE(server.server, nullptr);
  Ids ids;
  Registration registration(
      server.address(), RandomRequest(), [] { return Registration::Health{}; },
      [&](const std::string& id) { ids.Add(id); });
  registration.Start();
  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return r.heartbeats >= 1; }, absl::Seconds(5)));
  registry.Forget();
  ASSERT_TRUE(registry.WaitFor(
      [](const auto& r) { return r.registrations >= 2 && r.heartbeats >= 2; }, absl::Seconds(5)));
  const std::vector<std::string> seen = ids.Get();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_EQ(registration.worker_id(), seen[1]);
  EXPECT_GE(registry.record().rejected_heartbeats, 1);
  registration.Stop();
  server.server->Shutdown();
}

TEST(Registration, KeepsRetryingUntilTheCoordinatorComesBack) {
  // Learn a free port, then leave it empty: the coordinator is "down".
  FakeWorkerRegistry first(kIntervalMs);
  LoopbackServer server = StartLoopbackServer({&first});
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;
  Ids ids;
  Registration registration(
      server.address(), RandomRequest(), [] { return Registration::Health{}; },
      [&](const std::string& id) { ids.Add(id); });
  registration.Start();
  ASSERT_TRUE(first.WaitFor([](const auto& r) { return r.heartbeats >= 1; }, absl::Seconds(5)));
  server.server->Shutdown();
  server.server.reset();
  absl::SleepFor(absl::Milliseconds(600));  // heartbeats and nothing answers

  // A restarted coordinator knows nobody: the heartbeat's NOT_FOUND leads
  // to a fresh registration with it.
  FakeWorkerRegistry restarted(kIntervalMs);
  LoopbackServer again = StartLoopbackServer({&restarted}, port);
  ASSERT_NE(again.server, nullptr) << "port " << port << " was taken meanwhile";
  ASSERT_TRUE(restarted.WaitFor(
      [](const auto& r) { return r.registrations >= 1 && r.heartbeats >= 1; }, absl::Seconds(10)));
  EXPECT_EQ(ids.Get().size(), 2u);
  registration.Stop();
  again.server->Shutdown();
}

TEST(Registration, RetriesRegistrationWhileNobodyListensAndStopsPromptly) {
  FakeWorkerRegistry probe_registry(kIntervalMs);
  LoopbackServer probe = StartLoopbackServer({&probe_registry});
  ASSERT_NE(probe.server, nullptr);
  const int port = probe.port;
  probe.server->Shutdown();
  probe.server.reset();
  Ids ids;
  Registration registration(
      absl::StrCat("127.0.0.1:", port), RandomRequest(), [] { return Registration::Health{}; },
      [&](const std::string& id) { ids.Add(id); });
  registration.Start();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(ids.Get().empty());
  FakeWorkerRegistry registry(kIntervalMs);
  LoopbackServer late = StartLoopbackServer({&registry}, port);
  ASSERT_NE(late.server, nullptr) << "port " << port << " was taken meanwhile";
  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return r.heartbeats >= 1; }, absl::Seconds(10)));
  EXPECT_EQ(ids.Get().size(), 1u);
  late.server->Shutdown();
  late.server.reset();
  const absl::Time start = absl::Now();
  registration.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(Registration, CarriesActivityAndPassesOnTheJobsToAbort) {
  FakeWorkerRegistry registry(kIntervalMs);
  registry.set_abort_job_ids({"job-1"});
  LoopbackServer server = StartLoopbackServer({&registry});
  ASSERT_NE(server.server, nullptr);
  HealthSource health;
  {
    absl::MutexLock lock(&health.mu);
    health.health.activity.set_job_id("job-1");
    health.health.activity.set_phase("running");
    health.health.activity.set_steps_done(7);
  }
  Ids aborts;
  Registration registration(
      server.address(), RandomRequest(), [&] { return health.Get(); }, [](const std::string&) {});
  registration.set_on_abort([&](const std::string& job) { aborts.Add(job); });
  registration.Start();
  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return r.heartbeats >= 2; }, absl::Seconds(5)));
  FakeWorkerRegistry::Record record = registry.record();
  EXPECT_EQ(record.last_registration.activity().job_id(), "job-1");
  EXPECT_EQ(record.last_heartbeat.activity().phase(), "running");
  EXPECT_EQ(record.last_heartbeat.activity().steps_done(), 7);
  // Once from the registration and once per heartbeat answered.
  for (absl::Time deadline = absl::Now() + absl::Seconds(5);
       aborts.Get().size() < 3 && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::vector<std::string> told = aborts.Get();
  ASSERT_GE(told.size(), 3u);
  for (const std::string& job : told) EXPECT_EQ(job, "job-1");

  // The worker aborted it: its reports say so, and nothing more is asked.
  registry.set_abort_job_ids({});
  {
    absl::MutexLock lock(&health.mu);
    health.health.activity.Clear();
  }
  const int heartbeats = registry.record().heartbeats;
  ASSERT_TRUE(registry.WaitFor([&](const auto& r) { return r.heartbeats >= heartbeats + 3; },
                               absl::Seconds(5)));
  EXPECT_EQ(registry.record().last_heartbeat.activity().job_id(), "");
  const size_t before = aborts.Get().size();
  absl::SleepFor(absl::Milliseconds(3 * kIntervalMs));
  EXPECT_LE(aborts.Get().size(), before + 1);  // at most one answer was in flight
  registration.Stop();
}

TEST(Registration, AnnouncingAStopHeartbeatsAtOnceAndEveryLaterHeartbeatSaysSo) {
  FakeWorkerRegistry registry(/*heartbeat_interval_ms=*/60'000);  // only the first comes by itself
  LoopbackServer server = StartLoopbackServer({&registry});
  ASSERT_NE(server.server, nullptr);
  HealthSource health;
  Ids ids;
  Registration registration(
      server.address(), RandomRequest(), [&] { return health.Get(); },
      [&](const std::string& id) { ids.Add(id); });
  // Not registered yet: nothing to tell.
  EXPECT_EQ(registration.AnnounceStopping().status().code(),
            absl::StatusCode::kFailedPrecondition);
  registry.set_stopping_answer(true, "");
  registration.Start();
  ASSERT_TRUE(registry.WaitFor([](const auto& r) { return r.heartbeats >= 1; }, absl::Seconds(5)));
  // The failed announcement above already marks the heartbeats.
  EXPECT_TRUE(registry.record().last_heartbeat.stopping());

  const absl::Time start = absl::Now();
  absl::StatusOr<v1::HeartbeatResponse> answer = registration.AnnounceStopping();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the minute-long interval
  EXPECT_TRUE(answer->suspending());
  FakeWorkerRegistry::Record record = registry.record();
  EXPECT_EQ(record.stopping_heartbeats, 2);
  EXPECT_TRUE(record.last_heartbeat.stopping());
  EXPECT_FALSE(record.last_heartbeat.healthy());
  EXPECT_EQ(record.last_heartbeat.health_reason(), "shutting down");

  registry.set_stopping_answer(false, "job job-1 has no checkpoint.dir");
  answer = registration.AnnounceStopping();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->suspending());
  EXPECT_EQ(answer->not_suspended_reason(), "job job-1 has no checkpoint.dir");
  registration.Stop();
  server.server->Shutdown();
  EXPECT_FALSE(registration.AnnounceStopping().ok());  // nobody answers
}

}  // namespace
}  // namespace tessera

// The fixture the coordinator core's scheduling tests share: a Coordinator
// with in-memory workers (fake_worker_connection.h) and no background
// thread, so a test drives it by Tick() and reads what happened from the
// job and its events. Each test file adds the helpers its subject needs.
#ifndef TESSERA_SERVER_COORDINATOR_CORE_TEST_BASE_H_
#define TESSERA_SERVER_COORDINATOR_CORE_TEST_BASE_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"

namespace tessera {

// `name` under the test's temporary directory.
inline std::string TestTempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

class CoordinatorCoreTest : public ::testing::Test {
 protected:
  // Options for a core driven by Tick(): in-memory workers behaving as
  // `behavior` says, no background thread, workers presumed alive for 30 s.
  static CoordinatorOptions InMemoryOptions(FakeWorkerBehavior behavior = {}) {
    CoordinatorOptions options;
    options.start_background_thread = false;
    options.worker_timeout = absl::Seconds(30);
    options.connect = FakeWorkerConnector(behavior);
    return options;
  }

  void StartCore(CoordinatorOptions options) {
    core_ = std::make_unique<Coordinator>(std::move(options));
    ASSERT_TRUE(core_->Start().ok());
  }

  // Registers a CPU worker at `address`; its id.
  std::string AddWorker(const std::string& address, int64_t memory_bytes = 0) {
    v1::RegisterWorkerRequest req;
    req.set_address(address);
    req.mutable_device()->set_kind(v1::CPU);
    req.mutable_device()->set_memory_bytes(memory_bytes);
    absl::StatusOr<v1::RegisterWorkerResponse> registered = core_->RegisterWorker(req);
    EXPECT_TRUE(registered.ok()) << registered.status();
    return registered.ok() ? registered->worker_id() : "";
  }
  // Workers h:1 .. h:n.
  void AddWorkers(int n) {
    for (int i = 0; i < n; ++i) AddWorker(absl::StrCat("h:", i + 1));
  }

  // Ticks until `pred` holds for the job (30 s at most).
  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    v1::Job job;
    while (absl::Now() < deadline) {
      core_->Tick();
      job = *core_->GetJob(id);
      if (pred(job)) return job;
      absl::SleepFor(absl::Milliseconds(5));
    }
    ADD_FAILURE() << "timed out; " << id << " is " << v1::JobState_Name(job.state()) << ": "
                  << job.reason();
    return job;
  }
  v1::Job WaitForState(const std::string& id, v1::JobState state) {
    return WaitFor(id, [state](const v1::Job& j) { return j.state() == state; });
  }
  // Waits until the job is RUNNING with a few steps done.
  void WaitUntilRunningSteps(const std::string& id) {
    WaitFor(id, [](const v1::Job& j) { return j.state() == v1::RUNNING && j.steps_done() >= 3; });
  }

  // Every event of the job so far.
  std::vector<v1::JobEvent> Events(const std::string& id) {
    return (*core_->JobEvents(id))->Read(0, 0, absl::ZeroDuration()).events;
  }
  // The names of the states the job went through, in order.
  std::vector<std::string> Transitions(const std::string& id) {
    std::vector<std::string> out;
    for (const v1::JobEvent& e : Events(id)) {
      if (e.has_state_change()) out.push_back(v1::JobState_Name(e.state_change().state()));
    }
    return out;
  }

  std::unique_ptr<Coordinator> core_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_CORE_TEST_BASE_H_

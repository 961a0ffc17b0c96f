// The coordinator keeps a running job's slow ranks on its record, with each
// worker's address, writes one WARNING event per rank named, and empties the
// list when the attempt ends, also when that attempt ended with the
// coordinator itself.
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "common/spec_defaults.h"
#include "server/coordinator.h"
#include "server/job_store.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

std::unique_ptr<Coordinator> MakeCoordinator() {
  CoordinatorOptions options;
  options.start_background_thread = false;
  // The fake reports step_time * (1 + rank): rank 1 works twice as long.
  options.connect = FakeWorkerConnector(FakeWorkerBehavior());
  options.slow_ranks.threshold = 0.5;
  options.slow_ranks.window_steps = 5;
  auto core = std::make_unique<Coordinator>(options);
  EXPECT_TRUE(core->Start().ok());
  for (const char* address : {"h:1", "h:2"}) {
    v1::RegisterWorkerRequest req;
    req.set_address(address);
    req.mutable_device()->set_kind(v1::CPU);
    EXPECT_TRUE(core->RegisterWorker(req).ok());
  }
  return core;
}

TEST(CoordinatorSlowRanks, TheJobRecordNamesTheSlowRankWhileItRunsAndOneWarningIsWritten) {
  std::unique_ptr<Coordinator> core = MakeCoordinator();
  const std::string id = core->SubmitJob(TinyJobSpec(2, 100000))->id();
  v1::Job job;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    core->Tick();
    job = *core->GetJob(id);
    if (job.slow_ranks_size() > 0 && job.steps_done() >= 20) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(job.slow_ranks_size(), 1) << job.DebugString();
  EXPECT_EQ(job.slow_ranks(0).rank(), 1);
  EXPECT_EQ(job.slow_ranks(0).worker_id(), job.worker_ids(1));
  EXPECT_EQ(job.slow_ranks(0).address(), "h:2");
  EXPECT_NEAR(job.slow_ranks(0).slowdown(), 1.0, 1e-6);
  EXPECT_EQ(job.slow_ranks(0).window_steps(), 5);

  ASSERT_TRUE(core->CancelJob(id, "enough").ok());
  for (int i = 0; i < 3000 && core->GetJob(id)->state() != v1::CANCELLED; ++i) {
    core->Tick();
    absl::SleepFor(absl::Milliseconds(10));
  }
  job = *core->GetJob(id);
  ASSERT_EQ(job.state(), v1::CANCELLED);
  EXPECT_EQ(job.slow_ranks_size(), 0);  // the attempt's gang is gone

  std::shared_ptr<EventLog> log = *core->JobEvents(id);
  std::vector<v1::SlowRankChange> changes;
  for (const v1::JobEvent& e : log->Read(0, 1 << 30, absl::ZeroDuration()).events) {
    if (e.has_slow_rank()) changes.push_back(e.slow_rank());
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].severity(), v1::WARNING);
  EXPECT_TRUE(changes[0].slow());
  EXPECT_NE(changes[0].message().find("rank 1 (worker " + job.worker_ids(1) + " at h:2) is 100% "
                                      "slower than the median rank over the last 5 steps"),
            std::string::npos)
      << changes[0].message();
}

// A job record stored while a rank was named, by a coordinator that then
// died: the job is recovered (here it fails, having no checkpoint) without
// the old attempt's slow ranks.
TEST(CoordinatorSlowRanks, ARecoveredJobDoesNotKeepTheSlowRanksOfTheAttemptThatDied) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/slow-rank-state";
  mkdir(dir.c_str(), 0755);
  {
    auto store = JobStore::Open(dir + "/coordinator.db");
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Job job;
    job.set_id("job-1");
    *job.mutable_spec() = WithDefaults(TinyJobSpec(2, 10));
    job.set_state(v1::RUNNING);
    job.add_worker_ids("w-1");
    job.add_worker_ids("w-2");
    job.add_slow_ranks()->set_rank(1);
    v1::JobEvent e;
    e.set_sequence(1);
    e.mutable_state_change()->set_state(v1::RUNNING);
    ASSERT_TRUE((*store)->PutJobWithEvent(job, e).ok());
  }
  CoordinatorOptions options;
  options.state_dir = dir;
  options.start_background_thread = false;
  options.connect = FakeWorkerConnector(FakeWorkerBehavior());
  Coordinator core(options);
  ASSERT_TRUE(core.Start().ok());
  const v1::Job job = *core.GetJob("job-1");
  EXPECT_EQ(job.state(), v1::FAILED) << job.reason();
  EXPECT_EQ(job.slow_ranks_size(), 0);
}

}  // namespace
}  // namespace tessera

// The CLI's side of priorities and preemption, against the in-process fake
// Coordinator: `submit --dry-run` asks a named coordinator where the job
// would run (YAML comment lines after the spec, on stderr with --json), says
// so in one line when that coordinator cannot be reached, and reports a
// refused spec as a refusal; `watch` prints preemption events; `status`
// shows the priority and how often the job was preempted.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/fake_coordinator.h"
#include "client/job_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunTessera(const std::vector<std::string>& argv) {
  std::ostringstream out, err;
  Result r;
  r.code = RunCli(argv, out, err, /*is_tty=*/false);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string DefaultJob() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tessera/client/examples/default_job.yaml";
}

v1::PlacementExplanation Preempting() {
  v1::PlacementExplanation p;
  p.set_outcome(v1::PlacementExplanation::PREEMPT);
  p.add_preempt_job_ids("job-2");
  p.set_reason("would preempt job-2 and start once they release their workers: ...");
  p.set_priority(8);
  p.set_queue_position(1);
  p.set_rank_memory_bytes(int64_t{3} << 30);
  v1::CandidateWorker& busy = *p.add_workers();
  busy.set_worker_id("w-1");
  busy.set_address("10.0.0.1:7000");
  busy.set_device_name("cpu (2 cores)");
  busy.set_memory_bytes(int64_t{16} << 30);
  busy.set_healthy(true);
  busy.set_busy_with_job_id("job-2");
  busy.set_busy_with_priority(2);
  busy.set_memory_fit(v1::CandidateWorker::FITS);
  v1::CandidateWorker& small = *p.add_workers();
  small.set_worker_id("w-2");
  small.set_address("10.0.0.2:7000");
  small.set_device_name("cpu (2 cores)");
  small.set_memory_bytes(int64_t{2} << 30);
  small.set_healthy(true);
  small.set_memory_fit(v1::CandidateWorker::TOO_SMALL);
  return p;
}

constexpr char kPlacementLines[] =
    "# placement: would preempt job-2 and start once they release their workers: ...\n"
    "# priority 8, queue position 1, one rank needs 3.00 GiB\n"
    "# worker w-1 (10.0.0.1:7000, cpu (2 cores)): busy with job-2 (priority 2); 16.00 GiB, fits\n"
    "# worker w-2 (10.0.0.2:7000, cpu (2 cores)): free; 2.00 GiB, too small\n";

TEST(CliPlacementTest, DryRunWithACoordinatorSaysWhereTheJobWouldRun) {
  FakeCoordinator server;
  server.SetPlacement(Preempting());
  Result yaml = RunTessera({"submit", DefaultJob(), "--dry-run", "--coordinator", server.address()});
  ASSERT_EQ(yaml.code, kExitOk) << yaml.err;
  EXPECT_TRUE(absl::EndsWith(yaml.out, kPlacementLines)) << yaml.out;
  EXPECT_TRUE(ParseJobSpec(yaml.out, "dry-run output").ok());  // comments keep it a job file
  ASSERT_EQ(server.explained().size(), 1u);
  EXPECT_EQ(server.explained()[0].model().d_model(), 128);
  EXPECT_EQ(server.calls("SubmitJob"), 0);  // nothing submitted

  Result json = RunTessera(
      {"submit", DefaultJob(), "--dry-run", "--json", "--coordinator", server.address()});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  EXPECT_TRUE(absl::EndsWith(json.err, kPlacementLines)) << json.err;
  EXPECT_FALSE(absl::StrContains(json.out, "#"));
}

TEST(CliPlacementTest, DryRunWithoutANamedCoordinatorAsksNobody) {
  FakeCoordinator server;
  unsetenv("TESSERA_COORDINATOR");
  Result r = RunTessera({"submit", DefaultJob(), "--dry-run"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "# placement")) << r.out;
  EXPECT_EQ(server.calls("ExplainPlacement"), 0);
  // $TESSERA_COORDINATOR names one as --coordinator does.
  setenv("TESSERA_COORDINATOR", server.address().c_str(), 1);
  Result env = RunTessera({"submit", DefaultJob(), "--dry-run"});
  unsetenv("TESSERA_COORDINATOR");
  EXPECT_TRUE(absl::StrContains(env.out, "# placement: ")) << env.out;
  EXPECT_EQ(server.calls("ExplainPlacement"), 1);
}

TEST(CliPlacementTest, AnUnreachableCoordinatorLeavesTheOfflineDryRun) {
  Result r = RunTessera({"submit", DefaultJob(), "--dry-run", "--coordinator", "127.0.0.1:1"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "# memory per rank")) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out,
                             "# placement: not checked: cannot reach coordinator at 127.0.0.1:1 "
                             "(connection refused)\n"))
      << r.out;
}

TEST(CliPlacementTest, ARefusedSpecIsARefusal) {
  FakeCoordinator server;
  server.FailNext("ExplainPlacement",
                  {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "priority: must be in [1, 9], or 0 for the default 5 (got 12)")});
  Result r = RunTessera({"submit", DefaultJob(), "--dry-run", "--coordinator", server.address()});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_EQ(r.err,
            "tessera: INVALID_ARGUMENT: priority: must be in [1, 9], or 0 for the default 5 (got "
            "12)\n");
}

TEST(CliPlacementTest, WatchPrintsPreemptionsAndStatusThePriority) {
  FakeCoordinator server;
  v1::Job job;
  job.set_id("job-2");
  job.mutable_spec()->set_steps(10);
  job.mutable_spec()->set_priority(2);
  job.set_preemptions(1);
  job.set_state(v1::SUCCEEDED);
  job.set_reason("completed 10 steps");
  std::vector<v1::JobEvent> events(3);
  v1::Preemption& decided = *events[0].mutable_preemption();
  decided.set_stage(v1::Preemption::DECIDED);
  decided.set_preemptor_job_id("job-7");
  decided.set_preemptor_priority(8);
  decided.add_victim_job_ids("job-2");
  decided.set_reason("it lacks 2 workers; preempting job-2 (priority 2, 2 workers): ...");
  v1::Preemption& free = *events[1].mutable_preemption();
  free = decided;
  free.set_stage(v1::Preemption::WORKERS_FREE);
  free.set_seconds_to_free(1.25);
  free.set_stopped_at_step(6);
  free.set_resume_step(6);
  free.set_requeued(true);
  events[2].mutable_state_change()->set_state(v1::SUCCEEDED);
  server.AddJob(job, events);

  v1::Job preemptor;
  preemptor.set_id("job-7");
  preemptor.mutable_spec()->set_steps(10);
  preemptor.set_state(v1::SUCCEEDED);
  server.AddJob(preemptor, {events[0], events[1], events[2]});
  Result seen_by_preemptor = RunTessera({"watch", "job-7", "--coordinator", server.address()});
  EXPECT_TRUE(absl::StrContains(
      seen_by_preemptor.out,
      "[preemption] it lacks 2 workers; preempting job-2 (priority 2, 2 workers): ...\n"))
      << seen_by_preemptor.out;

  Result r = RunTessera({"watch", "job-2", "--coordinator", server.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.out, "[preempted] by job-7 (priority 8), suspending at the next step boundary: it lacks "
             "2 workers; preempting job-2 (priority 2, 2 workers): ...\n"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "[preemption] job-2's workers free 1.25 s after the decision; "
                                "stopped at step 6, resumes from step 6 (0 steps to redo)\n"))
      << r.out;
  Result status = RunTessera({"status", "job-2", "--coordinator", server.address()});
  EXPECT_TRUE(absl::StrContains(status.out, "priority  2 (preempted 1 time)\n")) << status.out;
}

}  // namespace
}  // namespace tessera

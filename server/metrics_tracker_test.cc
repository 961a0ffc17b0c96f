#include "server/metrics_tracker.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobEvent Step(int step, int64_t tokens, double time_s) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_tokens(tokens);
  e.mutable_step()->set_step_time_s(time_s);
  e.mutable_step()->set_control_overhead_s(0.001);
  return e;
}

TEST(MetricsTrackerTest, CountsStepsAndTokensIncrementallyAndForgetsDeletedJobs) {
  std::vector<v1::Job> jobs(2);
  jobs[0].set_id("job-1");
  jobs[0].set_state(v1::RUNNING);
  jobs[1].set_id("job-2");
  jobs[1].set_state(v1::PENDING);
  std::vector<v1::WorkerRecord> workers(3);
  workers[0].set_healthy(true);
  workers[1].set_healthy(true);
  auto log = std::make_shared<EventLog>();
  auto empty = std::make_shared<EventLog>();
  MetricsTracker tracker(MetricsSource{
      [&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; }, [&] { return workers; },
      [&](const std::string& id) -> absl::StatusOr<std::shared_ptr<EventLog>> {
        return id == "job-1" ? log : empty;
      }});

  log->Append(Step(0, 100, 0.5), false);
  log->Append(Step(1, 100, 0.25), false);
  MetricsTracker::Snapshot first = tracker.Sync();
  EXPECT_EQ(first.jobs_by_state["RUNNING"], 1);
  EXPECT_EQ(first.jobs_by_state["PENDING"], 1);
  EXPECT_EQ(first.jobs_by_state["SUCCEEDED"], 0);
  EXPECT_EQ(first.workers_healthy, 2);
  EXPECT_EQ(first.workers_unhealthy, 1);
  EXPECT_EQ(first.jobs["job-1"].steps, 2);
  EXPECT_EQ(first.jobs["job-1"].tokens, 200);
  EXPECT_EQ(first.jobs["job-2"].steps, 0);
  EXPECT_EQ(first.new_step_times_s, (std::vector<double>{0.5, 0.25}));

  EXPECT_EQ(first.jobs["job-1"].peak_memory_bytes, 0);  // not reported
  v1::JobEvent with_memory = Step(2, 50, 1.0);
  with_memory.mutable_step()->set_peak_memory_bytes(12345);
  log->Append(with_memory, false);
  MetricsTracker::Snapshot second = tracker.Sync();
  EXPECT_EQ(second.jobs["job-1"].peak_memory_bytes, 12345);  // the most any record reported
  EXPECT_EQ(second.jobs["job-1"].steps, 3);
  EXPECT_EQ(second.jobs["job-1"].tokens, 250);
  EXPECT_EQ(second.new_step_times_s, (std::vector<double>{1.0}));

  jobs.erase(jobs.begin());
  MetricsTracker::Snapshot third = tracker.Sync();
  EXPECT_EQ(third.jobs.count("job-1"), 0u);
  EXPECT_TRUE(third.new_step_times_s.empty());
}

TEST(MetricsTrackerTest, SlowRanksNamedNowByJobAndWorker) {
  std::vector<v1::Job> jobs(2);
  jobs[0].set_id("job-1");
  jobs[0].set_state(v1::RUNNING);
  v1::SlowRank* slow = jobs[0].add_slow_ranks();
  slow->set_worker_id("w-2");
  slow->set_slowdown(0.4);
  jobs[1].set_id("job-2");
  jobs[1].set_state(v1::RUNNING);
  auto log = std::make_shared<EventLog>();
  MetricsTracker tracker(MetricsSource{
      [&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; },
      [] { return std::vector<v1::WorkerRecord>(); },
      [&](const std::string&) -> absl::StatusOr<std::shared_ptr<EventLog>> { return log; }});
  MetricsTracker::Snapshot named = tracker.Sync();
  ASSERT_EQ(named.slow_rank_slowdown.size(), 1u);
  EXPECT_DOUBLE_EQ((named.slow_rank_slowdown[{"job-1", "w-2"}]), 0.4);
  jobs[0].clear_slow_ranks();  // cleared, or the attempt ended
  EXPECT_TRUE(tracker.Sync().slow_rank_slowdown.empty());
}

TEST(MetricsTrackerTest, Fp8WorstFractionsOfTheNewestRecord) {
  std::vector<v1::Job> jobs(2);
  jobs[0].set_id("job-1");
  jobs[0].set_state(v1::RUNNING);
  v1::Fp8Numerics* numerics = jobs[0].mutable_last_numerics();
  for (double saturated : {0.002, 0.0}) {
    v1::Fp8TensorStats* t = numerics->add_tensors();
    t->set_saturated_fraction(saturated);
    t->set_underflow_fraction(saturated > 0 ? 0.0 : 0.03);
  }
  jobs[1].set_id("job-2");  // takes no statistics
  jobs[1].set_state(v1::RUNNING);
  auto log = std::make_shared<EventLog>();
  MetricsTracker tracker(MetricsSource{
      [&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; },
      [] { return std::vector<v1::WorkerRecord>(); },
      [&](const std::string&) -> absl::StatusOr<std::shared_ptr<EventLog>> { return log; }});
  MetricsTracker::Snapshot snapshot = tracker.Sync();
  EXPECT_TRUE(snapshot.jobs["job-1"].has_fp8_numerics);
  EXPECT_DOUBLE_EQ(snapshot.jobs["job-1"].fp8_worst_saturation, 0.002);
  EXPECT_DOUBLE_EQ(snapshot.jobs["job-1"].fp8_worst_underflow, 0.03);
  EXPECT_FALSE(snapshot.jobs["job-2"].has_fp8_numerics);
}

// Steps re-run after an automatic restart used to count again: a job that
// failed once after step 5 and resumed from its step-3 checkpoint showed
// more steps than it has. They now count once, and the re-runs separately.
TEST(MetricsTrackerTest, StepsReportedAgainAfterARestartCountOnceAndAsRepeated) {
  std::vector<v1::Job> jobs(1);
  jobs[0].set_id("job-1");
  jobs[0].set_state(v1::RUNNING);
  auto log = std::make_shared<EventLog>();
  MetricsSource source{[&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; },
                       [] { return std::vector<v1::WorkerRecord>(); },
                       [&](const std::string&) -> absl::StatusOr<std::shared_ptr<EventLog>> {
                         return log;
                       }};
  MetricsTracker tracker(source);
  for (int step = 0; step <= 5; ++step) log->Append(Step(step, 10, 0.1), false);
  EXPECT_EQ(tracker.Sync().jobs["job-1"].steps, 6);
  for (int step = 4; step <= 7; ++step) log->Append(Step(step, 10, 0.1), false);  // attempt 1
  MetricsTracker::Snapshot after = tracker.Sync();
  EXPECT_EQ(after.jobs["job-1"].steps, 8);
  EXPECT_EQ(after.jobs["job-1"].tokens, 80);
  EXPECT_EQ(after.jobs["job-1"].repeated_steps, 2);
  EXPECT_EQ(after.new_step_times_s.size(), 4u);  // every report took real time

  // A tracker started later (a restarted coordinator reading the restored
  // history) arrives at the same counts.
  MetricsTracker fresh(source);
  MetricsTracker::Snapshot replayed = fresh.Sync();
  EXPECT_EQ(replayed.jobs["job-1"].steps, 8);
  EXPECT_EQ(replayed.jobs["job-1"].tokens, 80);
  EXPECT_EQ(replayed.jobs["job-1"].repeated_steps, 2);
}

v1::JobEvent At(v1::JobEvent e, int64_t unix_ms) {
  e.set_time_unix_ms(unix_ms);
  return e;
}

TEST(MetricsTrackerTest, RecoveryCheckpointsRestartsLossesAndHeartbeatAges) {
  std::vector<v1::Job> jobs(1);
  jobs[0].set_id("job-1");
  jobs[0].set_state(v1::RUNNING);
  jobs[0].set_restarts(1);
  std::vector<v1::WorkerRecord> workers(2);
  workers[0].set_worker_id("w-1");
  workers[0].set_healthy(true);
  workers[0].set_last_heartbeat_unix_ms(100'000);
  workers[1].set_worker_id("w-2");  // never heartbeat: no age
  // EventLog stamps its own times, so the events are restored with theirs.
  auto log = std::make_shared<EventLog>();
  std::vector<v1::JobEvent> history;
  auto with_sequence = [&](v1::JobEvent e) {
    e.set_sequence(static_cast<int64_t>(history.size()) + 1);
    history.push_back(e);
  };
  with_sequence(At(Step(0, 10, 0.1), 1'000));
  v1::JobEvent checkpoint;
  checkpoint.mutable_checkpoint()->set_step(1);
  checkpoint.mutable_checkpoint()->set_write_s(0.75);
  with_sequence(At(checkpoint, 1'500));
  v1::JobEvent restarting;
  restarting.mutable_state_change()->set_state(v1::RESTARTING);
  with_sequence(At(restarting, 2'000));
  with_sequence(At(restarting, 2'500));  // a second failure before a step: still the first
  with_sequence(At(Step(1, 10, 0.1), 5'250));
  with_sequence(At(Step(2, 10, 0.1), 6'000));
  log->Restore(history, false);
  MetricsTracker tracker(MetricsSource{
      [&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; }, [&] { return workers; },
      [&](const std::string&) -> absl::StatusOr<std::shared_ptr<EventLog>> { return log; },
      [] { return int64_t{3}; }, [] { return absl::FromUnixMillis(102'500); }});
  MetricsTracker::Snapshot s = tracker.Sync();
  EXPECT_EQ(s.jobs["job-1"].restarts, 1);
  EXPECT_EQ(s.new_recovery_times_s, (std::vector<double>{3.25}));
  EXPECT_EQ(s.new_checkpoint_writes_s, (std::vector<double>{0.75}));
  EXPECT_EQ(s.worker_losses, 3);
  EXPECT_EQ(s.heartbeat_age_s, (std::map<std::string, double>{{"w-1", 2.5}}));
  EXPECT_EQ(s.jobs["job-1"].steps, 3);
  // Nothing new: nothing observed twice.
  MetricsTracker::Snapshot again = tracker.Sync();
  EXPECT_TRUE(again.new_recovery_times_s.empty());
  EXPECT_TRUE(again.new_checkpoint_writes_s.empty());
}

// A preemption's cost counts once, from the victim's event: the
// preemptor's copy of it is not a second preemption.
TEST(MetricsTrackerTest, CountsEachPreemptionOnceFromTheVictimsEvent) {
  std::vector<v1::Job> jobs(2);
  jobs[0].set_id("job-1");  // the victim
  jobs[0].set_state(v1::PENDING);
  jobs[1].set_id("job-2");  // the preemptor
  jobs[1].set_state(v1::RUNNING);
  auto victim = std::make_shared<EventLog>();
  auto preemptor = std::make_shared<EventLog>();
  MetricsTracker tracker(MetricsSource{
      [&]() -> absl::StatusOr<std::vector<v1::Job>> { return jobs; },
      [] { return std::vector<v1::WorkerRecord>{}; },
      [&](const std::string& id) -> absl::StatusOr<std::shared_ptr<EventLog>> {
        return id == "job-1" ? victim : preemptor;
      }});
  v1::JobEvent decided;
  decided.mutable_preemption()->set_stage(v1::Preemption::DECIDED);
  decided.mutable_preemption()->set_preemptor_job_id("job-2");
  decided.mutable_preemption()->add_victim_job_ids("job-1");
  v1::JobEvent freed = decided;
  freed.mutable_preemption()->set_stage(v1::Preemption::WORKERS_FREE);
  freed.mutable_preemption()->set_seconds_to_free(2.5);
  freed.mutable_preemption()->set_steps_redone(3);
  for (auto* log : {victim.get(), preemptor.get()}) {
    log->Append(decided, false);
    log->Append(freed, false);
  }
  MetricsTracker::Snapshot s = tracker.Sync();
  EXPECT_EQ(s.new_preemption_free_times_s, (std::vector<double>{2.5}));
  EXPECT_EQ(s.new_preemption_steps_redone, 3);
  MetricsTracker::Snapshot again = tracker.Sync();
  EXPECT_TRUE(again.new_preemption_free_times_s.empty());
  EXPECT_EQ(again.new_preemption_steps_redone, 0);
}

TEST(MetricsTrackerTest, ListAllJobsFollowsPagesAndStopsOnNoProgress) {
  int calls = 0;
  absl::StatusOr<std::vector<v1::Job>> all =
      ListAllJobs([&](const std::string& token)
                      -> absl::StatusOr<std::pair<std::vector<v1::Job>, std::string>> {
        ++calls;
        std::vector<v1::Job> page(1);
        page[0].set_id(token.empty() ? "a" : "b");
        return std::make_pair(page, token.empty() ? std::string("next") : std::string());
      });
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_EQ(calls, 2);
  absl::StatusOr<std::vector<v1::Job>> stuck = ListAllJobs(
      [](const std::string&) -> absl::StatusOr<std::pair<std::vector<v1::Job>, std::string>> {
        return std::make_pair(std::vector<v1::Job>{}, std::string("same"));
      });
  EXPECT_TRUE(stuck.ok());
}

}  // namespace
}  // namespace tessera

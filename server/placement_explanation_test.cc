// Dry-run placement answers: each outcome's reason, every worker of the
// job's kind with its memory verdict against one rank's estimate (fits,
// too small, not reported), busy workers named with their job's priority,
// other kinds left out, and a job submit would refuse reported as REFUSED.
#include "server/placement_explanation.h"

#include "absl/strings/match.h"
#include "common/memory_estimate.h"
#include "common/spec_defaults.h"
#include "gtest/gtest.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

v1::WorkerRecord Worker(const std::string& id, v1::DeviceKind kind, int64_t memory,
                        const std::string& job = "") {
  v1::WorkerRecord w;
  w.set_worker_id(id);
  w.set_address(id + ":1");
  w.mutable_device()->set_kind(kind);
  w.mutable_device()->set_name("cpu (2 cores)");
  w.mutable_device()->set_memory_bytes(memory);
  w.set_healthy(true);
  w.set_job_id(job);
  return w;
}

class PlacementExplanationTest : public ::testing::Test {
 protected:
  const v1::JobSpec spec_ = WithDefaults(TinyJobSpec(2, 10));
  const int64_t rank_bytes_ = EstimateRankMemory(spec_, 0, 2).total();
  const std::vector<v1::WorkerRecord> workers_ = {
      Worker("w-1", v1::CPU, rank_bytes_), Worker("w-2", v1::CPU, rank_bytes_ - 1, "job-4"),
      Worker("w-3", v1::CPU, 0), Worker("g-1", v1::CUDA, int64_t{80} << 30)};
};

TEST_F(PlacementExplanationTest, ListsEveryWorkerOfTheKindWithItsMemoryVerdict) {
  DryRunPlacement dry;
  dry.outcome = DryRunPlacement::Outcome::kStartNow;
  dry.worker_ids = {"w-1", "w-3"};
  dry.queue_position = 1;
  const v1::PlacementExplanation e =
      MakePlacementExplanation(spec_, dry, workers_, {{"job-4", 3}}, absl::OkStatus());
  EXPECT_EQ(e.outcome(), v1::PlacementExplanation::START_NOW);
  EXPECT_EQ(e.reason(), "would start now on 2 free CPU workers: w-1, w-3 (rank order)");
  EXPECT_EQ(e.rank_memory_bytes(), rank_bytes_);
  EXPECT_EQ(e.priority(), 5);
  ASSERT_EQ(e.workers_size(), 3);  // not the CUDA one
  EXPECT_EQ(e.workers(0).memory_fit(), v1::CandidateWorker::FITS);  // exactly enough
  EXPECT_EQ(e.workers(1).memory_fit(), v1::CandidateWorker::TOO_SMALL);
  EXPECT_EQ(e.workers(1).busy_with_job_id(), "job-4");
  EXPECT_EQ(e.workers(1).busy_with_priority(), 3);
  EXPECT_EQ(e.workers(2).memory_fit(), v1::CandidateWorker::UNKNOWN);
  EXPECT_TRUE(e.workers(0).busy_with_job_id().empty());
}

TEST_F(PlacementExplanationTest, PreemptWaitAndRefused) {
  DryRunPlacement preempt;
  preempt.outcome = DryRunPlacement::Outcome::kPreempt;
  preempt.victims = {"job-4"};
  preempt.reason = "waiting for 2 free healthy CPU workers; preempting: ...";
  v1::PlacementExplanation e =
      MakePlacementExplanation(spec_, preempt, workers_, {}, absl::OkStatus());
  EXPECT_EQ(e.outcome(), v1::PlacementExplanation::PREEMPT);
  EXPECT_EQ(e.preempt_job_ids_size(), 1);
  EXPECT_TRUE(absl::StartsWith(e.reason(), "would preempt job-4 and start once")) << e.reason();

  DryRunPlacement wait;
  wait.reason = "waiting for 2 free healthy CPU workers (3 registered, 1 free)";
  e = MakePlacementExplanation(spec_, wait, workers_, {}, absl::OkStatus());
  EXPECT_EQ(e.outcome(), v1::PlacementExplanation::WAIT);
  EXPECT_EQ(e.reason(), "would wait: " + wait.reason);

  e = MakePlacementExplanation(spec_, wait, workers_, {},
                               absl::ResourceExhaustedError("model: does not fit"));
  EXPECT_EQ(e.outcome(), v1::PlacementExplanation::REFUSED);
  EXPECT_EQ(e.reason(), "submit would refuse it: model: does not fit");
  EXPECT_EQ(e.workers_size(), 3);  // still listed, with their verdicts
}

}  // namespace
}  // namespace tessera

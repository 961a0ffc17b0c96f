// `tessera logs` behind the coordinator, with in-memory workers: every
// rank's lines merged in time order with the rank and worker filled in, the
// rank filter, NOT_FOUND and INVALID_ARGUMENT, a client that leaves, a
// follow that ends once the job has ended and its lines are read, and
// UNAVAILABLE only when no worker answers.
#include "server/job_logs.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

class JobLogsTest : public ::testing::Test {
 protected:
  void Make(FakeWorkerBehavior behavior) {
    MakeWith([behavior](int) { return behavior; });
  }
  // `behavior(n)` for the n-th connection opened: the job's run opens two,
  // then each log read one per rank.
  void MakeWith(std::function<FakeWorkerBehavior(int)> behavior) {
    CoordinatorOptions options;
    options.start_background_thread = false;
    options.connect = FakeWorkerConnector(std::move(behavior));
    core_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(core_->Start().ok());
    for (const char* address : {"h:1", "h:2"}) {
      v1::RegisterWorkerRequest req;
      req.set_address(address);
      req.mutable_device()->set_kind(v1::CPU);
      worker_ids_.push_back(core_->RegisterWorker(req)->worker_id());
    }
  }
  std::string RunJob() {
    const std::string id = core_->SubmitJob(TinyJobSpec(2, 3))->id();
    for (int i = 0; i < 500; ++i) {
      core_->Tick();
      if (core_->GetJob(id)->state() == v1::SUCCEEDED) return id;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "job never succeeded: " << core_->GetJob(id)->reason();
    return id;
  }
  absl::Status Stream(JobLogsRequest request, std::vector<v1::LogLine>* out,
                      int stop_after = -1) {
    return StreamJobLogs(
        *core_, request,
        [&](const v1::LogLine& line) {
          if (stop_after >= 0 && static_cast<int>(out->size()) >= stop_after) return false;
          out->push_back(line);
          return true;
        },
        [] { return false; });
  }

  std::unique_ptr<Coordinator> core_;
  std::vector<std::string> worker_ids_;
};

FakeWorkerBehavior Logging() {
  FakeWorkerBehavior b;
  b.log_messages = {"set up", "step 0", "step 2"};
  return b;
}

TEST_F(JobLogsTest, EveryRanksLinesInTimeOrderWithRankAndWorker) {
  Make(Logging());
  const std::string id = RunJob();
  std::vector<v1::LogLine> lines;
  ASSERT_TRUE(Stream({id}, &lines).ok());
  ASSERT_EQ(lines.size(), 6u);
  const v1::Job job = *core_->GetJob(id);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(lines[i].rank(), static_cast<int>(i % 2));  // same times: rank 0 first
    EXPECT_EQ(lines[i].worker_id(), job.worker_ids(lines[i].rank()));
    EXPECT_EQ(lines[i].message(), Logging().log_messages[i / 2]);
    EXPECT_EQ(lines[i].job_id(), id);
  }
}

TEST_F(JobLogsTest, RanksFilterAndBadRequests) {
  Make(Logging());
  const std::string id = RunJob();
  std::vector<v1::LogLine> lines;
  JobLogsRequest only_one{id, {1}};
  ASSERT_TRUE(Stream(only_one, &lines).ok());
  ASSERT_EQ(lines.size(), 3u);
  for (const v1::LogLine& l : lines) EXPECT_EQ(l.rank(), 1);

  std::vector<v1::LogLine> none;
  JobLogsRequest outside{id, {2}};
  const absl::Status bad_rank = Stream(outside, &none);
  EXPECT_EQ(bad_rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_rank.message().find("ranks: 2"), std::string::npos) << bad_rank;
  EXPECT_EQ(Stream({"job-999"}, &none).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(none.empty());
}

TEST_F(JobLogsTest, AClientThatLeavesEndsTheStream) {
  Make(Logging());
  const std::string id = RunJob();
  std::vector<v1::LogLine> lines;
  JobLogsRequest follow{id, {}, /*follow=*/true};
  EXPECT_TRUE(Stream(follow, &lines, /*stop_after=*/2).ok());
  EXPECT_EQ(lines.size(), 2u);
}

TEST_F(JobLogsTest, FollowingAnEndedJobReturnsOnceItsLinesAreRead) {
  Make(Logging());
  const std::string id = RunJob();
  std::vector<v1::LogLine> lines;
  JobLogsRequest follow{id, {}, /*follow=*/true, absl::Milliseconds(10)};
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Stream(follow, &lines).ok());
  EXPECT_EQ(lines.size(), 6u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(JobLogsTest, UnavailableOnlyWhenNoWorkerAnswers) {
  // The run's two connections work; the log reads' connections: the first
  // two (one read) both fail, then rank 0's fails and rank 1's answers.
  MakeWith([](int n) {
    FakeWorkerBehavior b = Logging();
    b.unreachable = n == 2 || n == 3 || n == 4;
    return b;
  });
  const std::string id = RunJob();
  std::vector<v1::LogLine> lines;
  const absl::Status none = Stream({id}, &lines);
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable) << none;
  EXPECT_NE(none.message().find("no worker of " + id + " could be reached"), std::string::npos)
      << none;
  EXPECT_TRUE(lines.empty());
  const absl::Status some = Stream({id}, &lines);
  EXPECT_TRUE(some.ok()) << some;
  ASSERT_EQ(lines.size(), 3u);
  for (const v1::LogLine& l : lines) EXPECT_EQ(l.rank(), 1);
}

}  // namespace
}  // namespace tessera

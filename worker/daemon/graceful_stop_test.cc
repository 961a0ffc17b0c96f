// A stopping worker's attempt to suspend its job, with a WorkerCore over a
// fake trainer and a scripted coordinator answer: nothing to do when idle;
// released within the grace period when the coordinator suspends the job
// (its Abort arrives); the caller's fallback, at once, when the coordinator
// will not suspend it, cannot be asked, or there is no grace period; and
// the grace period running out.
#include "worker/daemon/graceful_stop.h"

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"

namespace tessera {
namespace {

using Outcome = GracefulStop::Outcome;

class GracefulStopTest : public ::testing::Test {
 protected:
  // A job set up and joined on `core_`.
  void SetUpJob() {
    v1::SetupJobRequest r;
    r.set_job_id("job-1");
    r.set_world_size(1);
    r.mutable_spec()->mutable_model()->set_seq_len(8);
    r.mutable_spec()->mutable_data()->set_micro_batch_size(2);
    ASSERT_TRUE(core_.SetupJob(r).ok());
    ASSERT_TRUE(core_.InitCollective("job-1", nullptr, "h", absl::Seconds(1)).ok());
  }
  // An announcement answered with `answer`, counting the calls.
  std::function<absl::StatusOr<v1::HeartbeatResponse>()> Answer(
      absl::StatusOr<v1::HeartbeatResponse> answer) {
    return [this, answer] {
      ++announcements_;
      return answer;
    };
  }
  static v1::HeartbeatResponse Suspending() {
    v1::HeartbeatResponse r;
    r.set_suspending(true);
    return r;
  }

  WorkerCore core_{[](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new FakeTrainer());
  }};
  int announcements_ = 0;
};

TEST_F(GracefulStopTest, AnIdleWorkerAsksNothing) {
  GracefulStop stop = SuspendBeforeStopping(core_, Answer(Suspending()), absl::Seconds(5));
  EXPECT_EQ(stop.outcome, Outcome::kIdle);
  EXPECT_EQ(announcements_, 0);
}

TEST_F(GracefulStopTest, ASuspendedJobReleasesTheWorkerWithinTheGracePeriod) {
  SetUpJob();
  std::thread coordinator([this] {
    absl::SleepFor(absl::Milliseconds(100));  // the checkpoint, then the Abort
    core_.Abort("job-1", "job suspended").IgnoreError();
  });
  const absl::Time start = absl::Now();
  GracefulStop stop = SuspendBeforeStopping(core_, Answer(Suspending()), absl::Seconds(20));
  coordinator.join();
  EXPECT_EQ(stop.outcome, Outcome::kSuspended) << stop.message;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(announcements_, 1);
  EXPECT_EQ(core_.Activity().job_id(), "");
}

TEST_F(GracefulStopTest, AJobTheCoordinatorWillNotSuspendIsLeftToTheAbortAtOnce) {
  SetUpJob();
  v1::HeartbeatResponse refused;
  refused.set_not_suspended_reason("job job-1 cannot be suspended: it has no checkpoint.dir");
  const absl::Time start = absl::Now();
  GracefulStop stop = SuspendBeforeStopping(core_, Answer(refused), absl::Seconds(20));
  EXPECT_EQ(stop.outcome, Outcome::kNotSuspended);
  EXPECT_NE(stop.message.find("no checkpoint.dir"), std::string::npos) << stop.message;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(core_.Activity().job_id(), "job-1");  // the caller aborts it

  stop = SuspendBeforeStopping(core_, Answer(absl::UnavailableError("connection refused")),
                               absl::Seconds(20));
  EXPECT_EQ(stop.outcome, Outcome::kNotSuspended);
  EXPECT_NE(stop.message.find("connection refused"), std::string::npos) << stop.message;

  stop = SuspendBeforeStopping(core_, Answer(Suspending()), absl::ZeroDuration());
  EXPECT_EQ(stop.outcome, Outcome::kNotSuspended);
  EXPECT_EQ(announcements_, 2);  // no grace period: nothing asked
}

TEST_F(GracefulStopTest, TheGracePeriodBoundsTheWait) {
  SetUpJob();
  const absl::Time start = absl::Now();
  GracefulStop stop = SuspendBeforeStopping(core_, Answer(Suspending()), absl::Milliseconds(200));
  EXPECT_EQ(stop.outcome, Outcome::kGraceExpired);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_NE(stop.message.find("grace period"), std::string::npos) << stop.message;
}

}  // namespace
}  // namespace tessera

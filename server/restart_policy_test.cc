// The restart rule on its own: which causes restart, the budget, the
// "restarts exhausted" reason, and that the RESTARTING reason says where the
// next attempt resumes.
#include "server/restart_policy.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

AttemptEnd Failed(absl::StatusCode cause, std::string reason = "RunSteps failed on w-2") {
  return {v1::FAILED, cause, std::move(reason)};
}

TEST(RestartPolicy, OnlyLostWorkersFailedCollectivesAndTimeoutsAreRetryable) {
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kAborted));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kDeadlineExceeded));
  for (absl::StatusCode code :
       {absl::StatusCode::kOk, absl::StatusCode::kCancelled, absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kDataLoss, absl::StatusCode::kInternal, absl::StatusCode::kNotFound,
        absl::StatusCode::kUnknown}) {
    EXPECT_FALSE(IsRetryable(code)) << absl::StatusCodeToString(code);
  }
}

TEST(RestartPolicy, RetryableFailureWithBudgetLeftRestartsAndSaysWhereItResumes) {
  RestartDecision d = DecideAfterAttempt(Failed(absl::StatusCode::kAborted), 0, 2, 8);
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.state, v1::RESTARTING);
  EXPECT_NE(d.reason.find("restart 1 of 2"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("RunSteps failed on w-2"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("resume from checkpoint step 8"), std::string::npos) << d.reason;

  RestartDecision scratch = DecideAfterAttempt(Failed(absl::StatusCode::kUnavailable), 1, 2, 0);
  EXPECT_TRUE(scratch.restart);
  EXPECT_NE(scratch.reason.find("restart 2 of 2"), std::string::npos) << scratch.reason;
  EXPECT_NE(scratch.reason.find("start again from step 0"), std::string::npos) << scratch.reason;
}

TEST(RestartPolicy, ASpentBudgetFailsWithRestartsExhausted) {
  RestartDecision d = DecideAfterAttempt(Failed(absl::StatusCode::kDeadlineExceeded), 2, 2, 4);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.state, v1::FAILED);
  EXPECT_NE(d.reason.find("restarts exhausted (2 of 2 used)"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("RunSteps failed on w-2"), std::string::npos) << d.reason;
}

TEST(RestartPolicy, NonRetryableFailuresFailAtOnceWhateverTheBudget) {
  RestartDecision d =
      DecideAfterAttempt(Failed(absl::StatusCode::kResourceExhausted, "disk full"), 0, 5, 4);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.state, v1::FAILED);
  EXPECT_EQ(d.reason, "disk full");
}

TEST(RestartPolicy, WithoutABudgetTheReasonIsTheFailureItself) {
  RestartDecision d = DecideAfterAttempt(Failed(absl::StatusCode::kAborted, "peer died"), 0, 0, 4);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.state, v1::FAILED);
  EXPECT_EQ(d.reason, "peer died");
}

TEST(RestartPolicy, SuccessAndCancellationAreNeverRestarted) {
  for (v1::JobState state : {v1::SUCCEEDED, v1::CANCELLED}) {
    RestartDecision d =
        DecideAfterAttempt({state, absl::StatusCode::kAborted, "ended"}, 0, 3, 0);
    EXPECT_FALSE(d.restart);
    EXPECT_EQ(d.state, state);
    EXPECT_EQ(d.reason, "ended");
  }
}

}  // namespace
}  // namespace tessera

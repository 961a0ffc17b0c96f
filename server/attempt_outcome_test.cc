// The attempt-end decision on its own: each rule in front of the restart
// budget (cancel, shutdown, placing again, a failure after the last step, a
// suspended attempt), the order between them, and that what is left reaches
// the restart policy.
#include "server/attempt_outcome.h"

#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr int kSteps = 10;

// A retryable failure in the middle of a job with restarts to spare: left
// alone, it restarts.
EndedAttempt FailedMidway(absl::StatusCode cause = absl::StatusCode::kAborted,
                          std::string reason = "RunSteps failed on w-2") {
  EndedAttempt a;
  a.end = {v1::FAILED, cause, std::move(reason)};
  a.restarts_used = 0;
  a.max_restarts = 2;
  a.resume_step = 4;
  a.steps = kSteps;
  return a;
}

// A failure in setup because a placed worker refused the connection.
EndedAttempt FailedPlacing() {
  EndedAttempt a = FailedMidway(absl::StatusCode::kUnavailable, "SetupJob: w-3 unreachable");
  a.in_setup = true;
  a.workers_unreachable = true;
  return a;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(AttemptOutcome, ARetryableFailureLeftAloneIsRestartedByThePolicy) {
  AttemptOutcome o = DecideAttemptOutcome(FailedMidway());
  EXPECT_EQ(o.next, NextAttempt::kRestart);
  EXPECT_EQ(o.state, v1::RESTARTING);
  EXPECT_TRUE(Contains(o.reason, "restart 1 of 2")) << o.reason;
  EXPECT_TRUE(Contains(o.reason, "resume from checkpoint step 4")) << o.reason;
}

TEST(AttemptOutcome, ARetryableFailureWithTheBudgetSpentFails) {
  EndedAttempt a = FailedMidway();
  a.restarts_used = 2;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::FAILED);
  EXPECT_TRUE(Contains(o.reason, "restarts exhausted (2 of 2 used)")) << o.reason;
}

TEST(AttemptOutcome, ASuccessIsRecordedAsTheRunnerSaidIt) {
  EndedAttempt a = FailedMidway();
  a.end = {v1::SUCCEEDED, absl::StatusCode::kOk, "completed 10 steps"};
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::SUCCEEDED);
  EXPECT_EQ(o.reason, "completed 10 steps");
}

// Rule 1: a cancel beats a failure.

TEST(AttemptOutcome, ACancelDuringAFailureCancelsWithTheCancelsReason) {
  EndedAttempt a = FailedMidway();
  a.cancel_reason = "cancelled by alice";
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "cancelled by alice");
}

TEST(AttemptOutcome, ACancelDoesNotRewriteAnAttemptThatDidNotFail) {
  for (v1::JobState state : {v1::SUCCEEDED, v1::CANCELLED}) {
    EndedAttempt a = FailedMidway();
    a.end = {state, absl::StatusCode::kOk, "as the runner ended it"};
    a.cancel_reason = "cancelled by alice";
    AttemptOutcome o = DecideAttemptOutcome(a);
    EXPECT_EQ(o.next, NextAttempt::kNone);
    EXPECT_EQ(o.state, state);
    EXPECT_EQ(o.reason, "as the runner ended it");
  }
}

// Rule 2: a shutdown beats a failure.

TEST(AttemptOutcome, AShutdownDuringAFailureCancels) {
  EndedAttempt a = FailedMidway();
  a.shutting_down = true;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "coordinator shutting down");
}

TEST(AttemptOutcome, AShutdownDoesNotRewriteASuccess) {
  EndedAttempt a = FailedMidway();
  a.end = {v1::SUCCEEDED, absl::StatusCode::kOk, "completed 10 steps"};
  a.shutting_down = true;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.state, v1::SUCCEEDED);
  EXPECT_EQ(o.reason, "completed 10 steps");
}

TEST(AttemptOutcome, ACancelAndAShutdownDuringAFailureKeepTheCancelsReason) {
  EndedAttempt a = FailedMidway();
  a.cancel_reason = "cancelled by alice";
  a.shutting_down = true;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "cancelled by alice");
}

// Rule 3: a placement retry is not a restart.

TEST(AttemptOutcome, AFailureToReachAPlacedWorkerPlacesTheJobAgain) {
  AttemptOutcome o = DecideAttemptOutcome(FailedPlacing());
  EXPECT_EQ(o.next, NextAttempt::kPlaceAgain);
  EXPECT_EQ(o.state, v1::RESTARTING);
  EXPECT_EQ(o.reason,
            "placing the job again (not counted as a restart): SetupJob: w-3 unreachable");
}

TEST(AttemptOutcome, PlacingAgainDoesNotNeedARestartBudget) {
  for (int max_restarts : {0, 2}) {
    EndedAttempt a = FailedPlacing();
    a.max_restarts = max_restarts;
    a.restarts_used = max_restarts;  // spent, or none to spend
    AttemptOutcome o = DecideAttemptOutcome(a);
    EXPECT_EQ(o.next, NextAttempt::kPlaceAgain) << "max_restarts " << max_restarts;
    EXPECT_EQ(o.state, v1::RESTARTING);
  }
}

TEST(AttemptOutcome, PlacingAgainIsBoundedThenTheRestartPolicyDecides) {
  EndedAttempt a = FailedPlacing();
  a.placement_retries = kMaxPlacementRetries - 1;
  EXPECT_EQ(DecideAttemptOutcome(a).next, NextAttempt::kPlaceAgain);

  a.placement_retries = kMaxPlacementRetries;
  AttemptOutcome restarted = DecideAttemptOutcome(a);
  EXPECT_EQ(restarted.next, NextAttempt::kRestart);
  EXPECT_TRUE(Contains(restarted.reason, "restart 1 of 2")) << restarted.reason;

  a.restarts_used = a.max_restarts;
  AttemptOutcome failed = DecideAttemptOutcome(a);
  EXPECT_EQ(failed.next, NextAttempt::kNone);
  EXPECT_EQ(failed.state, v1::FAILED);
  EXPECT_TRUE(Contains(failed.reason, "restarts exhausted")) << failed.reason;
}

TEST(AttemptOutcome, OnlyAnUnreachableWorkerInSetupPlacesAgain) {
  EndedAttempt training = FailedPlacing();
  training.in_setup = false;
  EndedAttempt all_reachable = FailedPlacing();
  all_reachable.workers_unreachable = false;
  EndedAttempt collective = FailedPlacing();
  collective.end.cause = absl::StatusCode::kAborted;
  for (const EndedAttempt& a : {training, all_reachable, collective}) {
    AttemptOutcome o = DecideAttemptOutcome(a);
    EXPECT_EQ(o.next, NextAttempt::kRestart) << o.reason;
    EXPECT_TRUE(Contains(o.reason, "restart 1 of 2")) << o.reason;
  }
}

TEST(AttemptOutcome, ACancelOrShutdownInSetupIsNotPlacedAgain) {
  EndedAttempt cancelled = FailedPlacing();
  cancelled.cancel_reason = "cancelled by alice";
  AttemptOutcome o = DecideAttemptOutcome(cancelled);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "cancelled by alice");

  EndedAttempt shutdown = FailedPlacing();
  shutdown.shutting_down = true;
  o = DecideAttemptOutcome(shutdown);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "coordinator shutting down");
}

// Rule 4: resuming at the last step counts as success.

TEST(AttemptOutcome, AFailureAfterTheFinalCheckpointSucceeds) {
  for (absl::StatusCode cause :
       {absl::StatusCode::kAborted, absl::StatusCode::kResourceExhausted}) {
    EndedAttempt a = FailedMidway(cause, "peer died");
    a.resume_step = kSteps;
    AttemptOutcome o = DecideAttemptOutcome(a);
    EXPECT_EQ(o.next, NextAttempt::kNone);
    EXPECT_EQ(o.state, v1::SUCCEEDED);
    EXPECT_EQ(o.reason, "completed 10 steps (after the final checkpoint: peer died)");
  }
}

TEST(AttemptOutcome, AFailureAfterTheFinalCheckpointSucceedsWithTheBudgetSpent) {
  EndedAttempt a = FailedMidway();
  a.resume_step = kSteps;
  a.restarts_used = a.max_restarts;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.state, v1::SUCCEEDED);
}

TEST(AttemptOutcome, AFailureOneStepShortOfTheEndStillRestarts) {
  EndedAttempt a = FailedMidway();
  a.resume_step = kSteps - 1;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kRestart);
  EXPECT_TRUE(Contains(o.reason, "resume from checkpoint step 9")) << o.reason;
}

TEST(AttemptOutcome, ACancelOrShutdownAfterTheFinalCheckpointStillCancels) {
  EndedAttempt cancelled = FailedMidway();
  cancelled.resume_step = kSteps;
  cancelled.cancel_reason = "cancelled by alice";
  EXPECT_EQ(DecideAttemptOutcome(cancelled).state, v1::CANCELLED);

  EndedAttempt shutdown = FailedMidway();
  shutdown.resume_step = kSteps;
  shutdown.shutting_down = true;
  EXPECT_EQ(DecideAttemptOutcome(shutdown).state, v1::CANCELLED);
}

// Placing again is decided before the last-step rule: a job whose final
// checkpoint was committed but whose next placement hit a dead worker is
// placed again, and that attempt finds nothing left to run.
TEST(AttemptOutcome, PlacingAgainIsDecidedBeforeTheLastStepRule) {
  EndedAttempt a = FailedPlacing();
  a.resume_step = kSteps;
  EXPECT_EQ(DecideAttemptOutcome(a).next, NextAttempt::kPlaceAgain);
}

TEST(AttemptOutcome, ASuspendedAttemptLeavesTheJobSuspendedEvenInAShutdown) {
  EndedAttempt a = FailedMidway();
  a.end = {v1::SUSPENDED, absl::StatusCode::kOk, "suspended at step 6 (checkpoint committed)"};
  a.shutting_down = true;
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::SUSPENDED);
  EXPECT_EQ(o.reason, "suspended at step 6 (checkpoint committed)");
}

TEST(AttemptOutcome, ACancelDuringASuspendCancels) {
  EndedAttempt a = FailedMidway();
  a.end = {v1::SUSPENDED, absl::StatusCode::kOk, "suspended at step 6 (checkpoint committed)"};
  a.cancel_reason = "cancelled by user";
  AttemptOutcome o = DecideAttemptOutcome(a);
  EXPECT_EQ(o.next, NextAttempt::kNone);
  EXPECT_EQ(o.state, v1::CANCELLED);
  EXPECT_EQ(o.reason, "cancelled by user");
}

}  // namespace
}  // namespace tessera

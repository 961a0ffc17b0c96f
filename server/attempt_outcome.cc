// The decision taken when an attempt ends (see attempt_outcome.h). The rules
// are applied in the order the header lists them; each one that fires
// rewrites `end`, and a rewritten end is no longer a failure for the rules
// after it.
#include "server/attempt_outcome.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {

AttemptOutcome DecideAttemptOutcome(const EndedAttempt& attempt) {
  AttemptEnd end = attempt.end;
  if ((end.state == v1::FAILED || end.state == v1::SUSPENDED) && !attempt.cancel_reason.empty()) {
    end = {v1::CANCELLED, absl::StatusCode::kCancelled, attempt.cancel_reason};
  }
  if (end.state == v1::SUSPENDED) return {NextAttempt::kNone, v1::SUSPENDED, end.reason};
  if (end.state == v1::FAILED && attempt.shutting_down) {
    end = {v1::CANCELLED, absl::StatusCode::kCancelled, "coordinator shutting down"};
  }
  if (end.state == v1::FAILED && end.cause == absl::StatusCode::kUnavailable &&
      attempt.in_setup && attempt.workers_unreachable &&
      attempt.placement_retries < kMaxPlacementRetries) {
    return {NextAttempt::kPlaceAgain, v1::RESTARTING,
            absl::StrCat("placing the job again (not counted as a restart): ", end.reason)};
  }
  if (end.state == v1::FAILED && attempt.resume_step >= attempt.steps) {
    end = {v1::SUCCEEDED, absl::StatusCode::kOk,
           absl::StrCat("completed ", attempt.steps, " steps (after the final checkpoint: ",
                        end.reason, ")")};
  }
  RestartDecision decision =
      DecideAfterAttempt(end, attempt.restarts_used, attempt.max_restarts, attempt.resume_step);
  return {decision.restart ? NextAttempt::kRestart : NextAttempt::kNone, decision.state,
          std::move(decision.reason)};
}

}  // namespace tessera

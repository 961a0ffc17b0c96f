// The automatic-restart rule (see restart_policy.h).
#include "server/restart_policy.h"

#include "absl/strings/str_cat.h"

namespace tessera {

bool IsRetryable(absl::StatusCode cause) {
  return cause == absl::StatusCode::kUnavailable || cause == absl::StatusCode::kAborted ||
         cause == absl::StatusCode::kDeadlineExceeded;
}

RestartDecision DecideAfterAttempt(const AttemptEnd& end, int restarts_used, int max_restarts,
                                   int resume_step) {
  RestartDecision decision;
  decision.state = end.state;
  decision.reason = end.reason;
  if (end.state != v1::FAILED || !IsRetryable(end.cause) || max_restarts <= 0) return decision;
  if (restarts_used >= max_restarts) {
    decision.reason = absl::StrCat("restarts exhausted (", restarts_used, " of ", max_restarts,
                                   " used); last failure: ", end.reason);
    return decision;
  }
  decision.restart = true;
  decision.state = v1::RESTARTING;
  decision.reason = absl::StrCat(
      "restart ", restarts_used + 1, " of ", max_restarts, " after: ", end.reason, "; ",
      resume_step > 0 ? absl::StrCat("will resume from checkpoint step ", resume_step)
                      : std::string("no checkpoint committed, will start again from step 0"));
  return decision;
}

}  // namespace tessera

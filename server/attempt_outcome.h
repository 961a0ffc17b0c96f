// What the coordinator does with a job when one attempt of it ends: finish
// the job, place it again, or restart it. The rules that sit in front of the
// restart budget (restart_policy.h) are decided here, in one pure function,
// so that each of them and the order between them is unit-tested without a
// coordinator, its lock or its threads:
//
//   1. A cancel that raced with a failed attempt wins: the job is CANCELLED
//      with the cancel's reason, and nothing restarts.
//   2. So does a coordinator shutdown: CANCELLED, "coordinator shutting
//      down". When both happened, the cancel's reason is kept.
//   3. An attempt that failed in setup because a placed worker could not be
//      reached (it died before its heartbeats stopped) is placed again
//      without spending the restart budget, at most kMaxPlacementRetries
//      times.
//   4. A failure after the final step's checkpoint was committed leaves
//      nothing to redo, so the job SUCCEEDED.
//   5. An attempt that ended SUSPENDED (a suspend was asked for) leaves the
//      job SUSPENDED, unless a cancel raced with it (rule 1 applies to it
//      too). A shutdown does not cancel it: a suspended job holds nothing
//      and survives the coordinator.
//
// Whatever is left goes to DecideAfterAttempt, which restarts a retryable
// failure while JobSpec.max_restarts allows.
#ifndef TESSERA_SERVER_ATTEMPT_OUTCOME_H_
#define TESSERA_SERVER_ATTEMPT_OUTCOME_H_

#include <string>

#include "proto/tessera/v1/job.pb.h"
#include "server/restart_policy.h"

namespace tessera {

// How many times a job is placed again after a placed worker turned out to
// be gone, before such a failure counts like any other.
inline constexpr int kMaxPlacementRetries = 3;

// An attempt that ended, and what the coordinator knew about its job then.
struct EndedAttempt {
  AttemptEnd end;  // as the attempt's runner reported it (SUSPENDED included)
  // The reason of a CancelJob that arrived while the attempt ran; empty if
  // the job was not cancelled.
  std::string cancel_reason;
  bool shutting_down = false;  // the coordinator is shutting down
  // The job was still STARTING: the attempt ended before training began.
  bool in_setup = false;
  // At least one placed worker refused the connection.
  bool workers_unreachable = false;
  int placement_retries = 0;  // placements already repeated for this job
  int restarts_used = 0;      // restarts already spent (Job.restarts)
  int max_restarts = 0;       // JobSpec.max_restarts
  // The step a next attempt would start from: the newest committed
  // checkpoint, or where the first attempt started.
  int resume_step = 0;
  int steps = 0;  // JobSpec.steps
};

enum class NextAttempt {
  kNone,        // the job ends in AttemptOutcome::state
  kPlaceAgain,  // queued again; the restart budget is untouched
  kRestart,     // queued again; one restart is spent
};

struct AttemptOutcome {
  NextAttempt next = NextAttempt::kNone;
  // RESTARTING when there is a next attempt, else the job's terminal state.
  v1::JobState state = v1::FAILED;
  std::string reason;
};

AttemptOutcome DecideAttemptOutcome(const EndedAttempt& attempt);

}  // namespace tessera

#endif  // TESSERA_SERVER_ATTEMPT_OUTCOME_H_

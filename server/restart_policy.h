// What happens to a job when one attempt of it ends: the automatic-restart
// rule of JobSpec.max_restarts, kept apart from the threads and RPCs that
// carry it out so that every branch is unit-tested.
//
// Only failures whose cause is retryable restart: UNAVAILABLE (a worker was
// lost or could not be reached), ABORTED (a collective failed, usually
// because a peer died) and DEADLINE_EXCEEDED (a command or the step watchdog
// ran out of time). Anything else (a bad spec found late, out of memory, a
// damaged checkpoint, a full disk) would fail again the same way, so it
// fails the job at once. The budget counts restarts, not failures: with
// max_restarts N the job runs at most N + 1 attempts, and the failure after
// the N-th restart ends it with "restarts exhausted".
#ifndef TESSERA_SERVER_RESTART_POLICY_H_
#define TESSERA_SERVER_RESTART_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

bool IsRetryable(absl::StatusCode cause);

struct AttemptEnd {
  v1::JobState state = v1::FAILED;  // SUCCEEDED, FAILED or CANCELLED
  absl::StatusCode cause = absl::StatusCode::kUnknown;  // why a FAILED attempt failed
  std::string reason;
};

struct RestartDecision {
  bool restart = false;
  // RESTARTING when restart is true, else the job's terminal state.
  v1::JobState state = v1::FAILED;
  std::string reason;
};

// `restarts_used` restarts happened before this attempt ended; the next
// attempt would resume from `resume_step` (0: from the start), which the
// RESTARTING reason states.
RestartDecision DecideAfterAttempt(const AttemptEnd& end, int restarts_used, int max_restarts,
                                   int resume_step);

}  // namespace tessera

#endif  // TESSERA_SERVER_RESTART_POLICY_H_

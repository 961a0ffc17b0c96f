// The job lifecycle: PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED |
// CANCELLED. Only these transitions are legal (plus PENDING/STARTING directly
// to FAILED or CANCELLED); anything else is FAILED_PRECONDITION. Terminal
// states are final and must carry a reason.
//
// Automatic restarts add one loop: STARTING or RUNNING -> RESTARTING (an
// attempt failed with a retryable error and the budget allows another)
// -> STARTING (a new gang was placed), or RESTARTING -> FAILED | CANCELLED.
// A restart must carry a reason too: it says why and where it resumes.
//
// Suspend and resume: RUNNING -> SUSPENDED (a checkpoint was committed at a
// step boundary on request and the workers were released) -> PENDING
// (resumed: queued again), or SUSPENDED -> CANCELLED. SUSPENDED is not
// terminal and must carry a reason: where the job stopped.
#ifndef TESSERA_SERVER_JOB_STATE_MACHINE_H_
#define TESSERA_SERVER_JOB_STATE_MACHINE_H_

#include <string>

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

bool IsTerminal(v1::JobState state);

// OK if `from` -> `to` is legal and a terminal `to` has a non-empty reason.
absl::Status CheckTransition(v1::JobState from, v1::JobState to, const std::string& reason);

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_STATE_MACHINE_H_

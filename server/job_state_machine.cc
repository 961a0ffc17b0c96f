// Legal job state transitions (see job_state_machine.h).
#include "server/job_state_machine.h"

#include "absl/strings/str_cat.h"

namespace tessera {

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

absl::Status CheckTransition(v1::JobState from, v1::JobState to, const std::string& reason) {
  bool legal = false;
  switch (from) {
    case v1::PENDING:
      legal = to == v1::STARTING || to == v1::FAILED || to == v1::CANCELLED;
      break;
    case v1::STARTING:
      legal = to == v1::RUNNING || to == v1::FAILED || to == v1::CANCELLED ||
              to == v1::RESTARTING;
      break;
    case v1::RUNNING:
      legal = to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED ||
              to == v1::RESTARTING || to == v1::SUSPENDED;
      break;
    case v1::RESTARTING:
      legal = to == v1::STARTING || to == v1::FAILED || to == v1::CANCELLED;
      break;
    case v1::SUSPENDED:
      legal = to == v1::PENDING || to == v1::CANCELLED;
      break;
    default:
      legal = false;
  }
  if (!legal) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job cannot go from ", v1::JobState_Name(from), " to ", v1::JobState_Name(to)));
  }
  if ((IsTerminal(to) || to == v1::RESTARTING || to == v1::SUSPENDED) && reason.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("terminal state ", v1::JobState_Name(to), " needs a reason"));
  }
  return absl::OkStatus();
}

}  // namespace tessera

// A stopping worker's attempt to suspend its job (see graceful_stop.h).
#include "worker/daemon/graceful_stop.h"

#include "absl/strings/str_cat.h"

namespace tessera {

GracefulStop SuspendBeforeStopping(
    WorkerCore& core,
    const std::function<absl::StatusOr<v1::HeartbeatResponse>()>& announce_stopping,
    absl::Duration grace) {
  using Outcome = GracefulStop::Outcome;
  const std::string job = core.Activity().job_id();
  if (job.empty()) return {Outcome::kIdle, "no job to suspend"};
  if (grace <= absl::ZeroDuration()) {
    return {Outcome::kNotSuspended,
            absl::StrCat("not suspending ", job, " (no grace period); aborting it")};
  }
  const absl::StatusOr<v1::HeartbeatResponse> answer = announce_stopping();
  if (!answer.ok()) {
    return {Outcome::kNotSuspended, absl::StrCat("could not ask the coordinator to suspend ", job,
                                                 " (", answer.status().message(),
                                                 "); aborting it")};
  }
  if (!answer->suspending()) {
    return {Outcome::kNotSuspended,
            absl::StrCat("the coordinator is not suspending ", job, " (",
                         answer->not_suspended_reason().empty() ? "it holds no job here"
                                                                : answer->not_suspended_reason(),
                         "); aborting it")};
  }
  if (core.WaitUntilIdle(grace)) {
    return {Outcome::kSuspended, absl::StrCat("the coordinator released this worker from ", job,
                                              ", which it was suspending")};
  }
  return {Outcome::kGraceExpired,
          absl::StrCat(job, " was not suspended within the grace period of ",
                       absl::FormatDuration(grace), "; aborting it")};
}

}  // namespace tessera

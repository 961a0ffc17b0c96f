// The coordinator's side of checkpoint now, suspend and resume (see
// coordinator.h): the checks in front of a request, handing it to the job's
// running attempt (job_runner.h does the step-boundary work), a stopping
// worker's request, and queueing a suspended job again. Split from
// coordinator.cc along that seam; the attempt's SUSPENDED end is recorded
// where every attempt's end is (FinishAttemptLocked).
#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "server/coordinator.h"
#include "server/job_access.h"
#include "server/request_limits.h"

namespace tessera {

absl::Status Coordinator::RequestBoundaryLocked(JobEntry& entry, bool suspend,
                                                const std::string& reason) {
  const v1::Job& job = entry.job;
  const char* what = suspend ? "suspended" : "checkpointed";
  if (job.spec().checkpoint().dir().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " cannot be ", what,
                     ": it has no checkpoint.dir to write a checkpoint into"));
  }
  if (job.state() != v1::RUNNING || entry.runner == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " is ", v1::JobState_Name(job.state()),
                     "; only a RUNNING job can be ", what));
  }
  if (suspend) return entry.runner->Suspend(reason);
  return entry.runner->CheckpointNow();
}

absl::StatusOr<v1::Job> Coordinator::CheckpointJob(const std::string& job_id,
                                                   const Principal& by) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobEntry* const entry, ChangeableEntryLocked(job_id, by, "checkpoint"));
  RETURN_IF_ERROR(RequestBoundaryLocked(*entry, /*suspend=*/false, ""));
  return SnapshotLocked(*entry);
}

absl::StatusOr<v1::Job> Coordinator::SuspendJob(const std::string& job_id,
                                                const std::string& reason, const Principal& by) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  RETURN_IF_ERROR(CheckStringLimit("reason", reason, kMaxReasonBytes));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobEntry* const found, ChangeableEntryLocked(job_id, by, "suspend"));
  JobEntry& entry = *found;
  const std::string who = by.user.empty() ? "user" : by.user;
  const std::string why =
      reason.empty() ? absl::StrCat("suspended by ", who)
                     : (by.user.empty() ? reason : absl::StrCat("suspended by ", who, ": ", reason));
  RETURN_IF_ERROR(RequestBoundaryLocked(entry, /*suspend=*/true, why));
  entry.explicit_suspend = true;  // stays SUSPENDED even if also being preempted
  entry.pending_actor = ActorOf(by);
  // Shown until the attempt ends; the SUSPENDED event carries the outcome.
  entry.job.set_reason(absl::StrCat("suspending at the next step boundary (", why, ")"));
  PersistLocked(entry.job);
  return SnapshotLocked(entry);
}

void Coordinator::SuspendForStoppingWorkerLocked(const std::string& worker_id,
                                                 v1::HeartbeatResponse* resp) {
  const v1::WorkerRecord* worker = registry_.Find(worker_id);
  if (worker == nullptr || worker->job_id().empty()) return;  // nothing to suspend
  auto it = jobs_.find(worker->job_id());
  if (it == jobs_.end()) return;
  JobEntry& entry = *it->second;
  const std::string why = absl::StrCat("worker ", worker_id, " is shutting down");
  if (absl::Status s = RequestBoundaryLocked(entry, /*suspend=*/true, why); !s.ok()) {
    resp->set_not_suspended_reason(std::string(s.message()));
    return;
  }
  resp->set_suspending(true);
  entry.explicit_suspend = true;
  const std::string shown = absl::StrCat("suspending at the next step boundary (", why, ")");
  if (entry.job.reason() != shown) {
    entry.job.set_reason(shown);
    PersistLocked(entry.job);
  }
}

absl::StatusOr<v1::Job> Coordinator::ResumeJob(const std::string& job_id, const Principal& by) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  ASSIGN_OR_RETURN(JobEntry* const found, ChangeableEntryLocked(job_id, by, "resume"));
  JobEntry& entry = *found;
  v1::Job& job = entry.job;
  if (job.state() != v1::SUSPENDED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.state()),
                     "; only a SUSPENDED job can be resumed"));
  }
  // A suspended job committed the step it stopped at.
  entry.resume_step = job.committed_step();
  entry.resume_known = true;
  entry.placement_retries = 0;
  SetStateLocked(entry, v1::PENDING,
                 absl::StrCat(by.user.empty() ? "resumed" : absl::StrCat("resumed by ", by.user),
                              "; will continue from checkpoint step ", entry.resume_step),
                 ActorOf(by));
  scheduler_.Enqueue(job.id(), job.spec(), options_.now());
  RefreshPendingLocked();
  return SnapshotLocked(entry);
}

}  // namespace tessera

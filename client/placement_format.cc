// Placement and preemption lines for the CLI (see placement_format.h).
#include "client/placement_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/memory_estimate.h"

namespace tessera {

std::string PlacementLines(const v1::PlacementExplanation& p) {
  std::string out = absl::StrCat("# placement: ", p.reason(), "\n");
  absl::StrAppend(&out, "# priority ", p.priority(), ", queue position ", p.queue_position(),
                  ", one rank needs ", FormatBytesAsGiB(p.rank_memory_bytes()), "\n");
  if (p.workers().empty()) absl::StrAppend(&out, "# no worker of the job's kind is registered\n");
  for (const v1::CandidateWorker& w : p.workers()) {
    std::string state = w.busy_with_job_id().empty()
                            ? std::string("free")
                            : absl::StrCat("busy with ", w.busy_with_job_id(), " (priority ",
                                           w.busy_with_priority(), ")");
    if (!w.healthy()) state = "unhealthy";
    std::string memory;
    switch (w.memory_fit()) {
      case v1::CandidateWorker::FITS:
        memory = absl::StrCat(FormatBytesAsGiB(w.memory_bytes()), ", fits");
        break;
      case v1::CandidateWorker::TOO_SMALL:
        memory = absl::StrCat(FormatBytesAsGiB(w.memory_bytes()), ", too small");
        break;
      default:
        memory = "memory not reported";
    }
    absl::StrAppend(&out, "# worker ", w.worker_id(), " (", w.address(), ", ", w.device_name(),
                    "): ", state, "; ", memory, "\n");
  }
  return out;
}

std::string PreemptionLine(const v1::Preemption& p, const std::string& job_id) {
  const bool victim = p.preemptor_job_id() != job_id;
  if (p.stage() == v1::Preemption::DECIDED) {
    if (victim) {
      return absl::StrCat("[preempted] by ", p.preemptor_job_id(), " (priority ",
                          p.preemptor_priority(), "), suspending at the next step boundary: ",
                          p.reason());
    }
    return absl::StrCat("[preemption] ", p.reason());
  }
  const std::string who = absl::StrJoin(p.victim_job_ids(), ", ");
  return absl::StrFormat(
      "[preemption] %s's workers free %.2f s after the decision; stopped at step %d, resumes "
      "from step %d (%d steps to redo)%s",
      who, p.seconds_to_free(), p.stopped_at_step(), p.resume_step(), p.steps_redone(),
      p.requeued() ? "" : absl::StrCat("; ", p.reason()));
}

}  // namespace tessera

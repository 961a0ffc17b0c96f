// The coordinator's side of priorities and preemption (see scheduler.h for
// the rules, preemption.h for victim choice): telling the scheduler which
// jobs hold workers and whether each may be preempted, carrying out a
// round's preemption decisions through the suspend path
// (coordinator_suspend.cc, job_runner.h), and, when a victim's attempt
// ends, reporting what the preemption cost and queueing the victim again.
// Also the dry-run placement, which asks the same scheduler. Split from
// coordinator.cc along that seam.
//
// A victim is suspended at its next step boundary with a checkpoint, like a
// user's suspend, but its attempt's SUSPENDED state is followed at once by
// PENDING: it is queued again (ahead of the jobs of its priority that have
// not started) and resumes from that checkpoint by itself when workers free
// up. Only if a person (SuspendJob) or a stopping worker also asked this
// attempt to suspend does it stay SUSPENDED, waiting for ResumeJob.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data_root.h"
#include "common/job_priority.h"
#include "common/status_macros.h"
#include "server/coordinator.h"
#include "server/job_state_machine.h"
#include "server/memory_admission.h"
#include "server/placement_explanation.h"
#include "server/request_limits.h"
#include "server/spec_validation.h"

namespace tessera {

std::vector<RunningJob> Coordinator::RunningJobsLocked() {
  std::vector<RunningJob> running;
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry->job;
    if (job.state() != v1::STARTING && job.state() != v1::RUNNING) continue;
    if (job.worker_ids_size() == 0) continue;
    RunningJob r;
    r.job_id = id;
    r.kind = job.spec().device_kind();
    r.priority = EffectiveJobPriority(job.spec());
    r.workers = job.worker_ids_size();
    r.started = entry->attempt_started;
    r.preempted_for = entry->preempted_by;
    if (job.spec().checkpoint().dir().empty()) {
      r.not_preemptible = "has no checkpoint.dir";
    } else if (job.state() != v1::RUNNING || entry->runner == nullptr) {
      r.not_preemptible = "is still STARTING";
    } else if (entry->explicit_suspend) {
      r.not_preemptible = "is already being suspended";
    }
    running.push_back(std::move(r));
  }
  return running;
}

void Coordinator::PreemptLocked(const PreemptionDecision& decision) {
  auto preemptor = jobs_.find(decision.job_id);
  if (preemptor == jobs_.end()) return;
  const absl::Time now = options_.now();
  std::vector<std::string> asked;
  for (const std::string& victim_id : decision.victims) {
    auto it = jobs_.find(victim_id);
    if (it == jobs_.end()) continue;
    JobEntry& victim = *it->second;
    const std::string why = absl::StrCat(
        "preempted by ", decision.job_id, " (priority ", decision.priority,
        "); queued again to resume from this checkpoint by itself when workers free up");
    // An attempt that ended meanwhile frees its workers anyway.
    if (!RequestBoundaryLocked(victim, /*suspend=*/true, why).ok()) continue;
    victim.preempted_by = decision.job_id;
    victim.preempted_by_priority = decision.priority;
    victim.preemption_decided = now;
    victim.job.set_reason(absl::StrCat("being preempted by ", decision.job_id, " (priority ",
                                       decision.priority,
                                       "): suspending at the next step boundary"));
    v1::JobEvent event;
    v1::Preemption& p = *event.mutable_preemption();
    p.set_stage(v1::Preemption::DECIDED);
    p.set_preemptor_job_id(decision.job_id);
    p.set_preemptor_priority(decision.priority);
    p.add_victim_job_ids(victim_id);
    p.set_reason(TruncateUtf8(decision.reason, kMaxStoredMessageBytes));
    AppendEventLocked(victim, event, false, /*with_record=*/true);
    asked.push_back(victim_id);
  }
  if (asked.empty()) return;
  v1::JobEvent event;
  v1::Preemption& p = *event.mutable_preemption();
  p.set_stage(v1::Preemption::DECIDED);
  p.set_preemptor_job_id(decision.job_id);
  p.set_preemptor_priority(decision.priority);
  for (const std::string& v : asked) p.add_victim_job_ids(v);
  p.set_reason(TruncateUtf8(decision.reason, kMaxStoredMessageBytes));
  AppendEventLocked(*preemptor->second, event, false, /*with_record=*/false);
}

void Coordinator::EndPreemptionLocked(JobEntry& entry) {
  const bool explicit_suspend = std::exchange(entry.explicit_suspend, false);
  if (entry.preempted_by.empty()) return;
  const std::string preemptor_id = std::exchange(entry.preempted_by, "");
  v1::Job& job = entry.job;
  const bool requeue = job.state() == v1::SUSPENDED && !explicit_suspend && !shut_down_;

  v1::JobEvent event;
  v1::Preemption& p = *event.mutable_preemption();
  p.set_stage(v1::Preemption::WORKERS_FREE);
  p.set_preemptor_job_id(preemptor_id);
  p.set_preemptor_priority(entry.preempted_by_priority);
  p.add_victim_job_ids(job.id());
  p.set_seconds_to_free(
      std::max(0.0, absl::ToDoubleSeconds(options_.now() - entry.preemption_decided)));
  // The steps it ran beyond its newest committed checkpoint are the ones it
  // runs again (none when the suspend checkpoint was committed).
  p.set_stopped_at_step(job.steps_done());
  p.set_resume_step(job.committed_step());
  p.set_steps_redone(std::max(0, job.steps_done() - job.committed_step()));
  p.set_requeued(requeue);
  if (requeue) {
    p.set_reason(absl::StrCat("its workers are free; it resumes from checkpoint step ",
                              job.committed_step(), " by itself"));
  } else {
    p.set_reason(absl::StrCat("its attempt ended ", v1::JobState_Name(job.state()),
                              explicit_suspend && job.state() == v1::SUSPENDED
                                  ? " and a suspend was also asked for, so it waits for a resume"
                                  : "",
                              "; not queued again by the preemption"));
  }
  if (requeue) job.set_preemptions(job.preemptions() + 1);
  AppendEventLocked(entry, event, false, /*with_record=*/true);
  if (auto it = jobs_.find(preemptor_id); it != jobs_.end() && !IsTerminal(it->second->job.state())) {
    AppendEventLocked(*it->second, event, false, /*with_record=*/false);
  }
  if (!requeue) return;
  // A suspended job committed the step it stopped at.
  entry.resume_step = job.committed_step();
  entry.resume_known = true;
  entry.placement_retries = 0;
  entry.preempted_note =
      absl::StrCat("preempted by ", preemptor_id, " (priority ", entry.preempted_by_priority,
                   "); resumes from checkpoint step ", entry.resume_step, " by itself");
  SetStateLocked(entry, v1::PENDING, entry.preempted_note);
  scheduler_.EnqueuePreempted(job.id(), job.spec(), options_.now());
  RefreshPendingLocked();
}

absl::StatusOr<v1::PlacementExplanation> Coordinator::ExplainPlacement(const v1::JobSpec& spec,
                                                                       const Principal& by) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  if (!spec.checkpoint().dir().empty()) {
    RETURN_IF_ERROR(
        CheckUnderDataRoot(options_.data_root, "checkpoint.dir", spec.checkpoint().dir()));
  }
  absl::MutexLock lock(&mu_);
  const v1::JobSpec full = WithDefaults(spec);
  const std::vector<v1::WorkerRecord> workers = registry_.List();
  const std::vector<RunningJob> running = RunningJobsLocked();
  std::map<std::string, int> priorities;
  for (const RunningJob& r : running) priorities[r.job_id] = r.priority;
  // The caller's quota applies as it would to the job they submit.
  const DryRunPlacement dry_run = scheduler_.DryRun(full, registry_, running, options_.now(),
                                                    QuotaLedgerLocked(), by.user);
  return MakePlacementExplanation(full, dry_run, workers, priorities,
                                  CheckJobFitsRegisteredWorkers(full, workers));
}

}  // namespace tessera

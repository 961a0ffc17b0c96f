// The coordinator's core (see coordinator.h).
#include "server/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_size.h"
#include "common/data_root.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "common/user_tokens.h"
#include "server/attempt_outcome.h"
#include "server/job_access.h"
#include "server/job_pagination.h"
#include "server/job_state_machine.h"
#include "server/memory_admission.h"
#include "server/model_flops.h"
#include "server/request_limits.h"
#include "server/fp8_numerics_warning.h"
#include "server/slow_rank_event.h"
#include "server/spec_validation.h"

namespace tessera {

absl::Status Coordinator::CheckJobId(const std::string& job_id) {
  return CheckStringLimit("job_id", job_id, kMaxIdBytes);
}

absl::Status Coordinator::NotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      registry_(options_.worker_timeout),
      scheduler_(options_.starvation_timeout),
      quotas_(options_.quotas) {}

Coordinator::~Coordinator() { Shutdown(); }

absl::Status Coordinator::Start() {
  if (!options_.state_dir.empty()) {
    RETURN_IF_ERROR(LoadPersisted());
  }
  if (options_.start_background_thread) {
    background_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) Tick();
    });
  }
  return absl::OkStatus();
}

void Coordinator::Shutdown() {
  {
    absl::MutexLock lock(&mu_);  // runner threads and Tick read it under mu_
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (background_.joinable()) background_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : jobs_) {
      if (entry->runner) entry->runner->Stop(v1::CANCELLED, "coordinator shutting down");
      if (entry->job.state() == v1::PENDING || entry->job.state() == v1::RESTARTING) {
        SetStateLocked(*entry, v1::CANCELLED, "coordinator shutting down");
      }
      if (entry->thread.joinable()) threads.push_back(std::move(entry->thread));
    }
  }
  for (auto& t : threads) t.join();
}

v1::Job Coordinator::SnapshotLocked(const JobEntry& entry) {
  v1::Job job = entry.job;
  job.set_queue_position(scheduler_.Position(job.id()));
  return job;
}

void Coordinator::SetStateLocked(JobEntry& entry, v1::JobState state,
                                 const std::string& full_reason, const std::string& actor) {
  v1::Job& job = entry.job;
  if (!CheckTransition(job.state(), state, full_reason).ok()) return;
  std::string by = actor;
  if (by.empty() && (state == v1::CANCELLED || state == v1::SUSPENDED)) by = entry.pending_actor;
  entry.pending_actor.clear();
  // Reasons quote worker errors; keep every stored job record bounded.
  const std::string reason = TruncateUtf8(full_reason, kMaxStoredMessageBytes);
  int64_t now_ms = absl::ToUnixMillis(options_.now());
  job.set_state(state);
  job.set_reason(reason);
  // A restarted job keeps its first start, so its wall time includes recovery.
  if (state == v1::RUNNING && job.start_time_unix_ms() == 0) job.set_start_time_unix_ms(now_ms);
  if (IsTerminal(state)) {
    job.set_end_time_unix_ms(now_ms);
    job.set_queue_position(0);
    scheduler_.Remove(job.id());
    // Normally released already when the attempt ended; this catches the
    // rest without assuming the workers are idle.
    for (const std::string& w : job.worker_ids()) {
      registry_.Release(w, job.id(), /*confirmed_idle=*/false);
    }
    rendezvous_.DropJob(job.id());
  }
  v1::JobEvent event;
  event.mutable_state_change()->set_state(state);
  event.mutable_state_change()->set_reason(reason);
  event.mutable_state_change()->set_actor(by);
  AppendEventLocked(entry, event, IsTerminal(state), /*with_record=*/true);
}

absl::StatusOr<Coordinator::JobEntry*> Coordinator::ChangeableEntryLocked(
    const std::string& job_id, const Principal& by, absl::string_view action) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  RETURN_IF_ERROR(CheckMayChangeJob(by, it->second->job, action));
  return it->second.get();
}

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::JobSpec& spec, const Principal& by) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  if (!spec.checkpoint().dir().empty()) {
    RETURN_IF_ERROR(
        CheckUnderDataRoot(options_.data_root, "checkpoint.dir", spec.checkpoint().dir()));
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  v1::JobSpec with_defaults = WithDefaults(spec);
  // Refused before it is queued: no registered worker could hold one rank.
  RETURN_IF_ERROR(CheckJobFitsRegisteredWorkers(with_defaults, registry_.List()));
  auto entry = std::make_unique<JobEntry>();
  v1::Job& job = entry->job;
  job.set_id(absl::StrCat("job-", next_job_number_++));
  job.set_owner(by.user);
  if (!with_defaults.checkpoint().dir().empty()) {
    job.set_checkpoint_bytes(EstimateCheckpointSize(with_defaults).total_bytes);
  }
  *job.mutable_spec() = std::move(with_defaults);
  job.set_create_time_unix_ms(absl::ToUnixMillis(options_.now()));
  job.set_state(v1::PENDING);
  scheduler_.Enqueue(job.id(), job.spec(), options_.now());
  QuotaLedger quotas = QuotaLedgerLocked();
  quotas.SetOwner(job.id(), job.owner());  // not in jobs_ yet
  job.set_reason(scheduler_.PendingReasons(registry_, options_.now(), RunningJobsLocked(),
                                           quotas)[job.id()]);
  v1::JobEvent event;
  event.mutable_state_change()->set_state(v1::PENDING);
  event.mutable_state_change()->set_reason(job.reason());
  event.mutable_state_change()->set_actor(ActorOf(by));
  AppendEventLocked(*entry, event, false, /*with_record=*/true);
  std::string id = job.id();
  jobs_[id] = std::move(entry);
  return SnapshotLocked(*jobs_[id]);
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  return SnapshotLocked(*it->second);
}

absl::StatusOr<Coordinator::JobPage> Coordinator::ListJobs(const std::vector<v1::JobState>& states,
                                                           int page_size,
                                                           const std::string& page_token,
                                                           const std::string& owner) {
  ASSIGN_OR_RETURN(const int size, ResolvePageSize(page_size));
  RETURN_IF_ERROR(CheckStringLimit("owner", owner, kMaxUserNameBytes));
  const uint64_t fingerprint = FilterFingerprint(states, owner);
  ASSIGN_OR_RETURN(const std::optional<JobListPosition> after,
                   DecodePageToken(page_token, fingerprint));

  absl::MutexLock lock(&mu_);
  std::vector<std::pair<JobListPosition, const JobEntry*>> matching;
  for (const auto& [id, entry] : jobs_) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), entry->job.state()) == states.end()) {
      continue;
    }
    if (!owner.empty() && entry->job.owner() != owner) continue;
    JobListPosition position = PositionOf(entry->job);
    if (after && !ListedBefore(*after, position)) continue;  // on an earlier page
    matching.emplace_back(std::move(position), entry.get());
  }
  std::sort(matching.begin(), matching.end(),
            [](const auto& a, const auto& b) { return ListedBefore(a.first, b.first); });
  JobPage page;
  int64_t bytes = 0;
  for (const auto& [position, entry] : matching) {
    v1::Job job = SnapshotLocked(*entry);
    // A repeated message in the response costs its size plus a tag and a
    // length prefix (at most 6 bytes together for jobs this small).
    bytes += static_cast<int64_t>(job.ByteSizeLong()) + 6;
    const bool full = static_cast<int>(page.jobs.size()) >= size ||
                      (!page.jobs.empty() && bytes > kMaxJobsPageBytes);
    if (full) {
      page.next_page_token = EncodePageToken(PositionOf(page.jobs.back()), fingerprint);
      break;
    }
    page.jobs.push_back(std::move(job));
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& job_id,
                                               const std::string& reason, const Principal& by) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  RETURN_IF_ERROR(CheckStringLimit("reason", reason, kMaxReasonBytes));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobEntry* const found, ChangeableEntryLocked(job_id, by, "cancel"));
  JobEntry& entry = *found;
  if (IsTerminal(entry.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is already ", v1::JobState_Name(entry.job.state())));
  }
  const std::string who = by.user.empty() ? "user" : by.user;
  std::string why = reason.empty() ? absl::StrCat("cancelled by ", who)
                                   : absl::StrCat("cancelled by ", who, ": ", reason);
  entry.cancel_reason = why;  // an attempt ending right now must not restart
  if (entry.runner) {
    entry.pending_actor = ActorOf(by);
    entry.runner->Stop(v1::CANCELLED, why);  // the runner thread records the terminal state
  } else {
    SetStateLocked(entry, v1::CANCELLED, why, ActorOf(by));
  }
  return SnapshotLocked(entry);
}

absl::Status Coordinator::DeleteJob(const std::string& job_id, const Principal& by) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobEntry* const found, ChangeableEntryLocked(job_id, by, "delete"));
  JobEntry& entry = *found;
  auto it = jobs_.find(job_id);
  if (!IsTerminal(entry.job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(entry.job.state()),
                     "; only a job that has ended can be deleted (cancel it first)"));
  }
  if (entry.thread.joinable()) {
    // A terminal job's runner thread has recorded its end and only has to
    // return; its callbacks never run again.
    if (!entry.thread_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is still releasing its workers; try again"));
    }
    entry.thread.join();
  }
  if (store_ != nullptr) {
    // The records left may no longer show the highest number handed out.
    store_->SetCounter(kNextJobNumberCounter, next_job_number_).IgnoreError();
    store_->DeleteJob(job_id).IgnoreError();
  }
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<EventLog>> Coordinator::JobEvents(const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound(job_id);
  return it->second->events;
}

absl::StatusOr<std::vector<Coordinator::RankLogSource>> Coordinator::JobLogSources(
    const std::string& job_id, const std::vector<int>& ranks) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  std::vector<std::pair<int, std::pair<std::string, std::string>>> where;  // rank, (id, address)
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return NotFound(job_id);
    const v1::Job& job = it->second->job;
    const int world = job.spec().world_size();
    for (int r : ranks) {
      if (r < 0 || r >= world) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ranks: ", r, " is not a rank of ", job_id, " (world_size ", world, ")"));
      }
    }
    for (int r = 0; r < job.worker_ids_size(); ++r) {
      if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), r) == ranks.end()) continue;
      const v1::WorkerRecord* w = registry_.Find(job.worker_ids(r));
      if (w == nullptr) continue;  // it left: its lines are gone with it
      where.push_back({r, {w->worker_id(), w->address()}});
    }
  }
  std::vector<RankLogSource> sources;
  for (auto& [rank, worker] : where) {
    RankLogSource source;
    source.rank = rank;
    source.worker_id = worker.first;
    source.connection = options_.connect(worker.second);
    sources.push_back(std::move(source));
  }
  return sources;
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"address", &req.address()},
        {"device.name", &req.device().name()},
        {"device.host", &req.device().host()}}) {
    RETURN_IF_ERROR(CheckStringLimit(field, *value, kMaxAddressBytes));
  }
  if (req.address().empty() || req.address().find(':') == std::string::npos) {
    return absl::InvalidArgumentError("address: must be host:port of the worker's WorkerService");
  }
  if (req.device().kind() != v1::CPU && req.device().kind() != v1::CUDA) {
    return absl::InvalidArgumentError("device.kind: must be CPU or CUDA");
  }
  RETURN_IF_ERROR(CheckActivity(req.activity()));
  absl::MutexLock lock(&mu_);
  v1::RegisterWorkerResponse resp;
  const std::string id =
      registry_.Register(req.address(), req.device(), options_.now(), req.activity());
  resp.set_worker_id(id);
  resp.set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  if (std::string orphan = registry_.OrphanJob(id); !orphan.empty()) {
    resp.add_abort_job_ids(orphan);
  }
  RefreshPendingLocked();
  return resp;
}

absl::Status Coordinator::CheckActivity(const v1::WorkerActivity& activity) {
  RETURN_IF_ERROR(CheckStringLimit("activity.job_id", activity.job_id(), kMaxIdBytes));
  return CheckStringLimit("activity.phase", activity.phase(), kMaxPhaseBytes);
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& req) {
  RETURN_IF_ERROR(CheckStringLimit("worker_id", req.worker_id(), kMaxIdBytes));
  RETURN_IF_ERROR(CheckStringLimit("health_reason", req.health_reason(), kMaxReasonBytes));
  RETURN_IF_ERROR(CheckActivity(req.activity()));
  RETURN_IF_ERROR(CheckStringLimit("address", req.address(), kMaxAddressBytes));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(registry_.Heartbeat(req.worker_id(), req.healthy(), req.health_reason(),
                                      options_.now(), req.activity(), req.address()));
  v1::HeartbeatResponse resp;
  if (std::string orphan = registry_.OrphanJob(req.worker_id()); !orphan.empty()) {
    resp.add_abort_job_ids(orphan);
  }
  if (req.stopping()) SuspendForStoppingWorkerLocked(req.worker_id(), &resp);
  return resp;
}

int64_t Coordinator::WorkerLosses() {
  absl::MutexLock lock(&mu_);
  return registry_.losses();
}

std::vector<v1::WorkerRecord> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  return registry_.List();
}

void Coordinator::RefreshPendingLocked() {
  for (auto& [id, reason] :
       scheduler_.PendingReasons(registry_, options_.now(), RunningJobsLocked(),
                                 QuotaLedgerLocked())) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobEntry& entry = *it->second;
    const std::string& note =
        entry.job.state() == v1::RESTARTING ? entry.restart_note : entry.preempted_note;
    const std::string full =
        note.empty() ? reason
                     : TruncateUtf8(absl::StrCat(note, "; now ", reason), kMaxStoredMessageBytes);
    if (full != entry.job.reason()) {
      entry.job.set_reason(full);
      PersistLocked(entry.job);
    }
  }
}

void Coordinator::JoinFinishedLocked() {
  for (auto& [id, entry] : jobs_) {
    if (entry->thread_done && entry->thread.joinable()) entry->thread.join();
  }
}

void Coordinator::StartJobLocked(JobEntry& entry, const Placement& placement) {
  v1::Job& job = entry.job;
  // A restart's previous attempt has returned; its thread only has to end.
  if (entry.thread.joinable()) entry.thread.join();
  entry.thread_done = false;
  entry.attempt_started = options_.now();
  entry.preempted_note.clear();
  job.clear_worker_ids();
  job.clear_slow_ranks();
  JobAttempt attempt;
  attempt.number = job.restarts();
  if (entry.resume_known) attempt.resume_step = entry.resume_step;
  std::vector<std::unique_ptr<WorkerConnection>> connections;
  // MFU needs every device's peak; one unknown (a CPU worker) means none.
  double peak_flops = 0.0;
  bool peaks_known = true;
  for (const std::string& w : placement.worker_ids) {
    registry_.Assign(w, job.id());
    job.add_worker_ids(w);
    const auto* record = registry_.Find(w);
    connections.push_back(options_.connect(record->address()));
    const double peak = PeakBf16FlopsPerSecond(record->device().name());
    peaks_known = peaks_known && peak > 0;
    peak_flops += peak;
  }
  const double flops_per_token = TrainingFlopsPerToken(job.spec().model());
  const std::string id = job.id();
  JobRunnerCallbacks callbacks;
  callbacks.on_state = [this, id](v1::JobState state, const std::string& reason) {
    absl::MutexLock lock(&mu_);
    SetStateLocked(*jobs_[id], state, reason);
  };
  callbacks.on_step = [this, id, flops_per_token, peak_flops = peaks_known ? peak_flops : 0.0](
                          const v1::StepMetrics& step) {
    v1::StepMetrics m = step;
    if (peak_flops > 0) m.set_mfu(m.tokens_per_s() * flops_per_token / peak_flops);
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    v1::Job& j = e.job;
    double total = j.mean_control_overhead_s() * j.steps_done() + m.control_overhead_s();
    j.set_steps_done(m.step() + 1);
    j.set_mean_control_overhead_s(total / j.steps_done());
    *j.mutable_last_metrics() = m;
    v1::JobEvent event;
    *event.mutable_step() = m;
    AppendEventLocked(e, event, false, /*with_record=*/true);
  };
  callbacks.on_commit = [this, id](const v1::CheckpointCommitted& commit) {
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    v1::Job& j = e.job;
    if (commit.step() <= j.committed_step()) return;
    // Stored at once, with its event: a coordinator restarted from here
    // resumes at it.
    j.set_committed_step(commit.step());
    v1::JobEvent event;
    *event.mutable_checkpoint() = commit;
    AppendEventLocked(e, event, false, /*with_record=*/true);
  };
  callbacks.on_checkpoint_skipped = [this, id](const v1::CheckpointSkipped& skipped) {
    absl::MutexLock lock(&mu_);
    v1::JobEvent event;
    *event.mutable_checkpoint_skipped() = skipped;
    event.mutable_checkpoint_skipped()->set_reason(
        TruncateUtf8(skipped.reason(), kMaxStoredMessageBytes));
    AppendEventLocked(*jobs_[id], event, false, /*with_record=*/true);
  };
  callbacks.on_worker_error = [this, id](const v1::WorkerError& error) {
    absl::MutexLock lock(&mu_);
    v1::JobEvent event;
    *event.mutable_worker_error() = error;
    event.mutable_worker_error()->set_message(
        TruncateUtf8(error.message(), kMaxStoredMessageBytes));
    AppendEventLocked(*jobs_[id], event, false, /*with_record=*/false);
  };
  callbacks.on_slow_rank = [this, id, workers = placement.worker_ids](
                              const StragglerChange& change) {
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    const std::string& worker = workers[change.rank];
    const v1::WorkerRecord* record = registry_.Find(worker);
    v1::JobEvent event;
    *event.mutable_slow_rank() =
        MakeSlowRankChange(change, worker, record != nullptr ? record->address() : "");
    ApplySlowRankChange(event.slow_rank(), e.job);
    AppendEventLocked(e, event, false, /*with_record=*/true);
  };
  callbacks.on_numerics = [this, id, recipe = job.spec().fp8()](const v1::Fp8Numerics& numerics) {
    const std::vector<v1::Fp8NumericsWarning> warnings = Fp8NumericsWarnings(numerics, recipe);
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    *e.job.mutable_last_numerics() = numerics;
    v1::JobEvent event;
    *event.mutable_numerics() = numerics;
    AppendEventLocked(e, event, false, /*with_record=*/true);
    for (const v1::Fp8NumericsWarning& warning : warnings) {
      v1::JobEvent warning_event;
      *warning_event.mutable_numerics_warning() = warning;
      AppendEventLocked(e, warning_event, false, /*with_record=*/false);
    }
  };
  entry.runner = std::make_shared<JobRunner>(id, job.spec(), placement.worker_ids,
                                             std::move(connections), options_.rendezvous_address,
                                             options_.collective_timeout, std::move(callbacks),
                                             attempt, options_.slow_ranks);
  std::shared_ptr<JobRunner> runner = entry.runner;
  entry.thread = std::thread([this, id, runner] {
    JobOutcome outcome = runner->Run();
    absl::MutexLock lock(&mu_);
    JobEntry& e = *jobs_[id];
    FinishAttemptLocked(e, outcome);
    e.thread_done = true;
  });
}

void Coordinator::FinishAttemptLocked(JobEntry& entry, const JobOutcome& outcome) {
  v1::Job& job = entry.job;
  entry.runner.reset();
  job.clear_slow_ranks();  // they were this attempt's gang's
  // Workers that refused the connection are gone; those that acknowledged
  // the Abort are free; the others stay out of the pool until they report
  // that they hold nothing.
  for (const std::string& w : outcome.unreachable_workers) registry_.MarkLost(w);
  for (const std::string& w : job.worker_ids()) {
    const bool idle = std::find(outcome.idle_workers.begin(), outcome.idle_workers.end(), w) !=
                      outcome.idle_workers.end();
    registry_.Release(w, job.id(), idle);
  }
  // The next attempt bootstraps its collective group from scratch.
  rendezvous_.DropJob(job.id());
  if (job.restarts() == 0) entry.first_step = outcome.first_step;
  if (outcome.committed_step > job.committed_step()) job.set_committed_step(outcome.committed_step);

  EndedAttempt ended;
  ended.end = {outcome.state, outcome.cause, outcome.reason};
  ended.cancel_reason = entry.cancel_reason;
  ended.shutting_down = shut_down_;
  ended.in_setup = job.state() == v1::STARTING;
  ended.workers_unreachable = !outcome.unreachable_workers.empty();
  ended.placement_retries = entry.placement_retries;
  ended.restarts_used = job.restarts();
  ended.max_restarts = job.spec().max_restarts();
  ended.resume_step = std::max(job.committed_step(), entry.first_step);
  ended.steps = job.spec().steps();
  const AttemptOutcome decision = DecideAttemptOutcome(ended);
  if (decision.next == NextAttempt::kNone) {
    SetStateLocked(entry, decision.state, decision.reason);
    EndPreemptionLocked(entry);
    return;
  }
  if (decision.next == NextAttempt::kPlaceAgain) {
    ++entry.placement_retries;
  } else {
    job.set_restarts(job.restarts() + 1);
  }
  entry.resume_step = ended.resume_step;
  entry.resume_known = true;
  entry.restart_note = TruncateUtf8(decision.reason, kMaxStoredMessageBytes);
  SetStateLocked(entry, v1::RESTARTING, decision.reason);
  scheduler_.EnqueueRestart(job.id(), job.spec(), options_.now());
  EndPreemptionLocked(entry);
  RefreshPendingLocked();
}

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  JoinFinishedLocked();
  for (const WorkerRegistry::Lost& lost : registry_.Sweep(options_.now())) {
    if (lost.job_id.empty()) continue;
    auto it = jobs_.find(lost.job_id);
    if (it == jobs_.end()) continue;
    JobEntry& entry = *it->second;
    v1::WorkerError error;
    error.set_worker_id(lost.worker_id);
    for (int r = 0; r < entry.job.worker_ids_size(); ++r) {
      if (entry.job.worker_ids(r) == lost.worker_id) error.set_rank(r);
    }
    error.set_code("UNAVAILABLE");
    error.set_message(lost.reason);
    v1::JobEvent event;
    *event.mutable_worker_error() = error;
    AppendEventLocked(entry, event, false, /*with_record=*/false);
    if (entry.runner) {
      entry.runner->Stop(v1::FAILED, lost.reason, absl::StatusCode::kUnavailable,
                         lost.worker_id);
    }
  }
  std::vector<PreemptionDecision> preemptions;
  for (const Placement& placement : scheduler_.Schedule(registry_, options_.now(),
                                                        RunningJobsLocked(), &preemptions,
                                                        QuotaLedgerLocked())) {
    auto it = jobs_.find(placement.job_id);
    if (it != jobs_.end()) StartJobLocked(*it->second, placement);
  }
  for (const PreemptionDecision& decision : preemptions) PreemptLocked(decision);
  RefreshPendingLocked();
}

}  // namespace tessera

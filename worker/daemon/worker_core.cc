// The worker's command state machine (see worker_core.h).
//
// Each command checks and advances the phase under mu_, then runs its trainer
// call on the compute thread with mu_ released, so Abort and GetWorkerStatus
// stay responsive while a step is in flight. The phase says which command is
// in flight; Abort waits for it to settle before destroying the trainer.
#include "worker/daemon/worker_core.h"

#include <cstdio>
#include <new>
#include <optional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_layout.h"
#include "common/evaluation_schedule.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"
#include "common/shadow_gap.h"
#include "common/spec_limits.h"
#include "formats/checkpoint_io.h"

namespace tessera {

WorkerCore::WorkerCore(TrainerFactory factory) : factory_(std::move(factory)) {}

WorkerCore::~WorkerCore() { Abort("", "worker shutting down").IgnoreError(); }

void WorkerCore::Log(v1::LogSeverity severity, const std::string& job_id, int rank, int step,
                     const std::string& message) {
  if (log_ != nullptr && !job_id.empty()) log_->Write(severity, job_id, rank, step, message);
}

void WorkerCore::LogFailure(const std::string& job_id, int rank, int step,
                            const std::string& command, const absl::Status& status) {
  Log(status.code() == absl::StatusCode::kCancelled ? v1::WARNING : v1::ERROR, job_id, rank, step,
      absl::StrCat(command, " failed: ", absl::StatusCodeToString(status.code()), ": ",
                   status.message()));
}

const char* WorkerCore::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kIdle: return "idle";
    case Phase::kSettingUp: return "setting_up";
    case Phase::kSetUp: return "set_up";
    case Phase::kJoining: return "joining_collective";
    case Phase::kReady: return "collective_ready";
    case Phase::kRunning: return "running";
    case Phase::kCheckpointing: return "checkpointing";
  }
  return "unknown";
}

absl::Status WorkerCore::Expect(const std::string& command, const std::string& job_id, Phase want) {
  if (job_id_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(command, " for ", job_id, ": worker is idle; SetupJob first"));
  }
  if (job_id != job_id_) {
    return absl::FailedPreconditionError(absl::StrCat(command, " for ", job_id,
                                                      ": worker holds job ", job_id_));
  }
  if (aborting_) {
    return absl::FailedPreconditionError(absl::StrCat(command, " for ", job_id,
                                                      ": the job is being aborted"));
  }
  if (phase_ != want) {
    return absl::FailedPreconditionError(absl::StrCat(command, " for ", job_id, ": worker is ",
                                                      PhaseName(phase_), ", expected ",
                                                      PhaseName(want)));
  }
  return absl::OkStatus();
}

absl::Status WorkerCore::ExpectJoined(const std::string& command, const std::string& job_id) {
  const Phase want = phase_ == Phase::kRunning ? Phase::kRunning : Phase::kReady;
  return Expect(command, job_id, want);
}

absl::Status WorkerCore::NoteHealth(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kDataLoss) {
    absl::MutexLock lock(&mu_);
    healthy_ = false;
    health_reason_ = status.ToString();
  }
  return status;
}

void WorkerCore::ClearJobLocked() {
  job_id_.clear();
  phase_ = Phase::kIdle;
  rank_ = 0;
  next_step_ = 0;
  steps_begun_ = 0;
  held_ = false;
  chunk_limit_ = -1;
  aborting_ = false;
  abort_reason_.clear();
  trainer_for_abort_ = nullptr;
  checkpoint_dirs_.clear();
  memory_reported_ = false;
  ++jobs_cleared_;
}

absl::StatusOr<v1::SetupJobResponse> WorkerCore::SetupJob(const v1::SetupJobRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (!healthy_) {
      return absl::UnavailableError(absl::StrCat("SetupJob for ", request.job_id(),
                                                 ": worker is unhealthy: ", health_reason_));
    }
    if (!job_id_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SetupJob for ", request.job_id(), ": worker is busy with job ", job_id_));
    }
    if (request.job_id().empty()) return absl::InvalidArgumentError("job_id: must be set");
    if (request.world_size() < 1 || request.rank() < 0 || request.rank() >= request.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("rank: must be in [0, world_size) (got rank ",
                                                     request.rank(), " of ",
                                                     request.world_size(), ")"));
    }
    // The coordinator checked these limits already; a spec that reaches a
    // worker some other way must not size its allocations either.
    if (absl::Status s = CheckSpecLimits(request.spec()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.", s.message()));
    }
    if (request.resume_step() != 0 &&
        (request.resume_step() < 0 || request.resume_step() >= request.spec().steps())) {
      return absl::InvalidArgumentError(
          absl::StrCat("resume_step: must be 0 or in [1, spec.steps) (got ",
                       request.resume_step(), " of ", request.spec().steps(), " steps)"));
    }
    if (request.resume_step() > 0 && request.spec().checkpoint().dir().empty()) {
      return absl::InvalidArgumentError(
          "spec.checkpoint.dir: must be set to resume from a checkpoint (resume_step > 0)");
    }
    job_id_ = request.job_id();
    spec_ = request.spec();
    rank_ = request.rank();
    phase_ = Phase::kSettingUp;
    next_step_ = 0;
  }
  absl::StatusOr<SetupReport> report = absl::InternalError("SetupJob: trainer never ran");
  bool restore_failed = false;  // the checkpoint's fault, not the worker's
  compute_.Run([&] {
    // Setup allocates everything the job needs; an allocation the host
    // cannot satisfy must fail this job, not end the daemon.
    try {
      absl::StatusOr<std::unique_ptr<Trainer>> trainer = factory_(request.spec());
      if (!trainer.ok()) {
        report = trainer.status();
        return;
      }
      trainer_ = std::move(*trainer);
      {
        absl::MutexLock lock(&mu_);
        trainer_for_abort_ = trainer_.get();
        // An Abort that arrived while the trainer was being built could not
        // reach it; pass it on now.
        if (aborting_) trainer_->Abort();
      }
      // A resumed job's weights come from its checkpoint, so the directory
      // it started from (model.init_from) is not read again.
      v1::JobSpec setup_spec = request.spec();
      if (request.resume_step() > 0) setup_spec.mutable_model()->clear_init_from();
      report = trainer_->Setup(setup_spec, request.rank(), request.world_size());
      // Resume: the freshly allocated state is replaced by the checkpoint's.
      if (report.ok() && request.resume_step() > 0) {
        if (absl::Status s =
                trainer_->Restore(request.spec().checkpoint().dir(), request.resume_step());
            !s.ok()) {
          report = s;
          restore_failed = true;
        } else {
          if (const std::string note = trainer_->restore_note(); !note.empty()) {
            Log(v1::INFO, request.job_id(), request.rank(), -1, note);
          }
          if (const std::string warning = trainer_->restore_warning(); !warning.empty()) {
            Log(v1::WARNING, request.job_id(), request.rank(), -1, warning);
          }
        }
      }
    } catch (const std::bad_alloc&) {
      report = absl::ResourceExhaustedError(absl::StrCat(
          "SetupJob for ", request.job_id(), ": out of host memory while setting up the job"));
    } catch (const std::length_error& e) {
      report = absl::ResourceExhaustedError(absl::StrCat(
          "SetupJob for ", request.job_id(), ": a buffer too large to allocate (", e.what(), ")"));
    }
    if (!report.ok()) {
      {
        absl::MutexLock lock(&mu_);
        trainer_for_abort_ = nullptr;
      }
      trainer_.reset();
    }
  });
  if (!report.ok()) {
    LogFailure(request.job_id(), request.rank(), -1, "SetupJob", report.status());
    // A damaged checkpoint (DATA_LOSS) says nothing about this worker's health.
    if (!restore_failed) NoteHealth(report.status()).IgnoreError();
    absl::MutexLock lock(&mu_);
    ClearJobLocked();  // also releases an Abort waiting on this setup
    return report.status();
  }
  absl::MutexLock lock(&mu_);
  phase_ = Phase::kSetUp;
  next_step_ = request.resume_step();
  steps_begun_ = next_step_;
  if (aborting_) {
    return absl::CancelledError(
        absl::StrCat("SetupJob for ", request.job_id(), ": aborted: ", abort_reason_));
  }
  v1::SetupJobResponse response;
  response.set_shard_parameters(report->shard_parameters);
  response.set_total_parameters(report->total_parameters);
  Log(v1::INFO, request.job_id(), request.rank(), -1,
      absl::StrCat("set up rank ", request.rank(), " of ", request.world_size(), ": ",
                   report->shard_parameters, " of ", report->total_parameters,
                   " parameters in this rank's shards",
                   request.resume_step() > 0
                       ? absl::StrCat(", resumed from the checkpoint of step ",
                                      request.resume_step())
                       : std::string()));
  if (!report->warning.empty()) {
    Log(v1::WARNING, request.job_id(), request.rank(), -1, report->warning);
  }
  return response;
}

absl::Status WorkerCore::InitCollective(const std::string& job_id, RendezvousStore* store,
                                        const std::string& host, absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Expect("InitCollective", job_id, Phase::kSetUp); !s.ok()) return s;
    phase_ = Phase::kJoining;
  }
  absl::Status status;
  compute_.Run([&] { status = trainer_->InitCollective(store, host, timeout); });
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    phase_ = status.ok() ? Phase::kReady : Phase::kSetUp;
    rank = rank_;
    if (aborting_ && status.ok()) {
      status = absl::CancelledError(
          absl::StrCat("InitCollective for ", job_id, ": aborted: ", abort_reason_));
    }
  }
  if (status.ok()) {
    Log(v1::INFO, job_id, rank, -1, absl::StrCat("joined the collective group as ", host));
  } else {
    LogFailure(job_id, rank, -1, "InitCollective", status);
  }
  return NoteHealth(status);
}

absl::Status WorkerCore::RunSteps(const std::string& job_id, int first_step, int num_steps,
                                  const std::function<void(const StepReport&)>& on_step) {
  v1::JobSpec spec;  // which steps are followed by an evaluation
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Expect("RunSteps", job_id, Phase::kReady); !s.ok()) return s;
    if (num_steps < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_steps: must be >= 0 (got ", num_steps, ")"));
    }
    if (first_step != next_step_) {
      return absl::FailedPreconditionError(
          absl::StrCat("RunSteps for ", job_id, ": steps must be consecutive; next step is ",
                       next_step_, ", asked for ", first_step));
    }
    phase_ = Phase::kRunning;
    spec = spec_;
    rank = rank_;
    // A limit left from the end of an earlier chunk is not this one's.
    if (chunk_limit_ <= first_step) chunk_limit_ = -1;
  }
  // Progress lines: the first step of each call, then every twentieth of
  // the job, and the job's last step.
  const int every = std::max(1, spec.steps() / 20);
  absl::Status status;
  int step = first_step;
  for (; step < first_step + num_steps; ++step) {
    {
      // Where a held or early-ended chunk stops: before beginning a step.
      absl::MutexLock lock(&mu_);
      auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !held_ || aborting_; };
      mu_.Await(absl::Condition(&released));
      if (aborting_) break;  // reported below
      if (chunk_limit_ >= 0 && step >= chunk_limit_) break;  // ended early: OK
      steps_begun_ = step + 1;
    }
    absl::Duration slowed = absl::ZeroDuration();
    if (failpoints_ != nullptr) {
      status = FireFailpointBeforeStep(step, &slowed);
      if (!status.ok()) break;
    }
    {
      absl::MutexLock lock(&mu_);
      if (aborting_) break;  // reported below
    }
    absl::StatusOr<StepReport> report = absl::InternalError("RunSteps: trainer never ran");
    compute_.Run([&] { report = trainer_->RunStep(step); });
    if (!report.ok()) {
      status = report.status();
      break;
    }
    // A slow failpoint stands for a slow host: its delay is this rank's own
    // step time (host time), not time its peers appear to take.
    report->compute_time_s += absl::ToDoubleSeconds(slowed);
    report->phases.host_s += absl::ToDoubleSeconds(slowed);
    {
      absl::MutexLock lock(&mu_);
      next_step_ = step + 1;
    }
    if (!report->engine_note.empty()) {
      Log(report->engine_note_is_warning ? v1::WARNING : v1::INFO, job_id, rank, step,
          report->engine_note);
    }
    // The validation loss goes out with the step it follows.
    if (EvaluatesAfterStep(spec, step)) {
      absl::StatusOr<ValidationReport> validation =
          absl::InternalError("RunSteps: evaluation never ran");
      compute_.Run([&] { validation = trainer_->Evaluate(); });
      if (!validation.ok()) {
        status = validation.status();
        break;
      }
      report->validation = *validation;
      Log(v1::INFO, job_id, rank, step,
          absl::StrFormat("validation loss %.4f over %d tokens", validation->loss,
                          validation->tokens));
    }
    // The bf16 shadow loss ran inside the step; rank 0 logs it (the losses
    // are global), as a warning when the gap is past the job's threshold.
    if (report->shadow.has_value() && rank == 0) {
      const ShadowReport& shadow = *report->shadow;
      const std::string warning =
          ShadowGapWarning(spec.fp8(), shadow.fp8_loss, shadow.bf16_loss);
      Log(warning.empty() ? v1::INFO : v1::WARNING, job_id, rank, step,
          warning.empty()
              ? absl::StrFormat("shadow loss: fp8 %.4f bf16 %.4f gap %+.4f over %d tokens",
                                shadow.fp8_loss, shadow.bf16_loss,
                                shadow.fp8_loss - shadow.bf16_loss, shadow.tokens)
              : warning);
    }
    // Once per job, after its first step: the memory SetupJob expected
    // against what the step really holds.
    bool report_memory = false;
    {
      absl::MutexLock lock(&mu_);
      report_memory = !memory_reported_ && report->peak_memory_bytes > 0;
      memory_reported_ = memory_reported_ || report_memory;
    }
    if (report_memory) {
      const int64_t estimate = EstimateRankMemory(spec, rank, ShardGroupSize(spec)).total();
      Log(v1::INFO, job_id, rank, step,
          absl::StrFormat("device memory in use after the step: %s; SetupJob's estimate: %s "
                          "(measured %+.1f%% of it)",
                          FormatBytesAsGiB(report->peak_memory_bytes), FormatBytesAsGiB(estimate),
                          estimate > 0 ? 100.0 * (report->peak_memory_bytes - estimate) / estimate
                                       : 0.0));
    }
    if (step == first_step || (step + 1) % every == 0 || step + 1 == spec.steps()) {
      Log(v1::INFO, job_id, rank, step,
          absl::StrFormat("loss %.4f, grad norm %.3f, lr %.3g, %d tokens in %.3f s", report->loss,
                          report->grad_norm, report->lr, report->tokens,
                          report->compute_time_s));
    }
    on_step(*report);
  }
  NoteHealth(status).IgnoreError();  // a fault counts even if the job was aborted
  {
    absl::MutexLock lock(&mu_);
    phase_ = Phase::kReady;
    steps_begun_ = next_step_;
    chunk_limit_ = -1;  // a limit ends one RunSteps
    // Whatever the trainer said about a step it was told to drop, the caller
    // sees one answer for an aborted job.
    if (aborting_ && next_step_ < first_step + num_steps) {
      status = absl::CancelledError(
          absl::StrCat("RunSteps for ", job_id, ": aborted: ", abort_reason_));
    }
  }
  if (!status.ok()) LogFailure(job_id, rank, step, "RunSteps", status);
  return status;
}

absl::StatusOr<int> WorkerCore::HoldSteps(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ExpectJoined("HoldSteps", job_id); !s.ok()) return s;
  held_ = true;
  return steps_begun_;
}

absl::Status WorkerCore::EndChunkAt(const std::string& job_id, int step) {
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = ExpectJoined("EndChunkAt", job_id); !s.ok()) return s;
    if (step < steps_begun_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "EndChunkAt for ", job_id, ": this rank has already begun step ", steps_begun_ - 1,
          ", so it cannot stop before step ", step));
    }
    chunk_limit_ = step;
    held_ = false;
    rank = rank_;
  }
  Log(v1::INFO, job_id, rank, step, absl::StrCat("the chunk ends before step ", step));
  return absl::OkStatus();
}

bool WorkerCore::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return job_id_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

absl::StatusOr<CheckpointStarted> WorkerCore::Checkpoint(const std::string& job_id, int step,
                                                         const std::string& dir) {
  Phase resume = Phase::kReady;
  {
    absl::MutexLock lock(&mu_);
    // Allowed before InitCollective too: the shards exist once set up.
    resume = phase_ == Phase::kSetUp ? Phase::kSetUp : Phase::kReady;
    if (absl::Status s = Expect("Checkpoint", job_id, resume); !s.ok()) return s;
    if (dir.empty()) return absl::InvalidArgumentError("dir: must be set");
    if (step != next_step_) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: the worker holds the state after ", next_step_,
                       " steps, so a checkpoint of it must say step ", next_step_, ", not ", step));
    }
    phase_ = Phase::kCheckpointing;
  }
  absl::StatusOr<CheckpointStarted> started =
      absl::InternalError("Checkpoint: trainer never ran");
  compute_.Run([&] { started = trainer_->StartCheckpoint(step, dir); });
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    phase_ = resume;
    rank = rank_;
    if (started.ok()) {
      checkpoint_dirs_[step] = dir;
      while (checkpoint_dirs_.size() > 4) checkpoint_dirs_.erase(checkpoint_dirs_.begin());
    }
  }
  if (!started.ok()) {
    LogFailure(job_id, rank, step, "Checkpoint", started.status());
    NoteHealth(started.status()).IgnoreError();
    return started;
  }
  std::string waited;
  if (started->wait_s >= 0.01) {
    waited = absl::StrFormat(" after waiting %.2f s for the previous checkpoint's write",
                             started->wait_s);
  }
  Log(v1::INFO, job_id, rank, step,
      started->background
          ? absl::StrFormat("checkpoint of step %d: %s copied off the device in %.2f s%s; "
                            "writing in the background",
                            step, FormatBytesAsGiB(started->bytes), started->snapshot_s, waited)
          : absl::StrFormat("checkpoint of step %d: %s written before training continued",
                            step, FormatBytesAsGiB(started->bytes)));
  return started;
}

absl::StatusOr<CheckpointWritten> WorkerCore::AwaitCheckpoint(const std::string& job_id,
                                                               int step) {
  Trainer* trainer = nullptr;
  std::string dir;
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    if (job_id.empty() || job_id != job_id_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "AwaitCheckpoint: job ", job_id, " is not on this worker (it holds ",
          job_id_.empty() ? std::string("no job") : absl::StrCat("job ", job_id_), ")"));
    }
    if (aborting_) {
      return absl::FailedPreconditionError(
          absl::StrCat("AwaitCheckpoint for ", job_id, ": the job is being aborted"));
    }
    auto it = checkpoint_dirs_.find(step);
    if (it == checkpoint_dirs_.end() || trainer_for_abort_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("AwaitCheckpoint for ", job_id, ": no checkpoint of step ", step,
                       " was started on this worker"));
    }
    dir = it->second;
    trainer = trainer_for_abort_;
    rank = rank_;
    // Abort waits for this call before it destroys the trainer.
    ++awaits_in_flight_;
  }
  absl::StatusOr<CheckpointWritten> written = trainer->AwaitCheckpoint(step);
  {
    absl::MutexLock lock(&mu_);
    --awaits_in_flight_;
  }
  if (written.ok()) {
    Log(v1::INFO, job_id, rank, step,
        absl::StrFormat("checkpoint written to %s: %s in %.2f s (%.2f GB/s)",
                        written->manifest_path, FormatBytesAsGiB(written->bytes),
                        written->write_s,
                        written->write_s > 0 ? written->bytes / written->write_s / 1e9 : 0.0));
  } else {
    LogFailure(job_id, rank, step, "AwaitCheckpoint", written.status());
    if (written.status().code() != absl::StatusCode::kCancelled) {
      NoteHealth(written.status()).IgnoreError();
    }
  }
  if (written.ok() && failpoints_ != nullptr) FireFailpointAfterCheckpoint(step, dir);
  return written;
}

absl::Status WorkerCore::FireFailpointBeforeStep(int step, absl::Duration* slowed) {
  const int rank = this->rank();
  std::optional<Failpoint> failpoint = failpoints_->TakeBeforeStep(rank, step);
  if (!failpoint.has_value()) return absl::OkStatus();
  if (failpoint->action == FailpointAction::kExit) KillThisProcessForFailpoint(*failpoint);
  // A slow range says so once, at its first step.
  if (step == failpoint->step) {
    std::fprintf(stderr, "tessera-worker: failpoint %s fired\n", failpoint->ToString().c_str());
    std::fflush(stderr);
    std::string job_id;
    {
      absl::MutexLock lock(&mu_);
      job_id = job_id_;
    }
    Log(v1::WARNING, job_id, rank, step,
        absl::StrCat("failpoint ", failpoint->ToString(), " fired"));
  }
  const absl::Time started = absl::Now();
  absl::MutexLock lock(&mu_);
  switch (failpoint->action) {
    case FailpointAction::kFailCollective:
      return absl::AbortedError(absl::StrCat("step ", step, ": the collective failed on rank ",
                                             rank, " (failpoint ", failpoint->ToString(), ")"));
    case FailpointAction::kHang:
      // A deadlocked step: heartbeats go on, only an Abort ends it.
      mu_.Await(absl::Condition(&aborting_));
      break;
    case FailpointAction::kSlow:
      mu_.AwaitWithTimeout(absl::Condition(&aborting_), absl::Milliseconds(failpoint->ms));
      *slowed = absl::Now() - started;
      break;
    default:
      break;
  }
  return absl::OkStatus();  // an Abort that ended the wait is seen by the caller
}

void WorkerCore::FireFailpointAfterCheckpoint(int step, const std::string& dir) {
  const int rank = this->rank();
  std::optional<Failpoint> failpoint = failpoints_->TakeAfterCheckpoint(rank, step);
  if (!failpoint.has_value()) return;
  // The rank's first data file, as its manifest names it.
  absl::Status status;
  absl::StatusOr<RankManifest> manifest = ReadRankManifest(dir, step, rank);
  std::string target;
  if (!manifest.ok()) {
    status = manifest.status();
  } else if (manifest->files.empty()) {
    status = absl::FailedPreconditionError("the manifest lists no file");
  } else {
    target = absl::StrCat(StepDir(dir, step), "/", manifest->files.front().name);
    status = FlipOneByte(target);
  }
  // A failpoint that could not do its harm says so: the checkpoint itself
  // is left as the trainer wrote it.
  if (status.ok()) {
    std::fprintf(stderr, "tessera-worker: failpoint %s fired: flipped a byte of %s\n",
                 failpoint->ToString().c_str(), target.c_str());
  } else {
    std::fprintf(stderr, "tessera-worker: failpoint %s could not corrupt the checkpoint: %s\n",
                 failpoint->ToString().c_str(), status.ToString().c_str());
  }
  std::fflush(stderr);
}

absl::Status WorkerCore::Abort(const std::string& job_id, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (job_id_.empty()) return absl::OkStatus();
    if (!job_id.empty() && job_id != job_id_) return absl::OkStatus();
    const int64_t generation = jobs_cleared_;
    auto job_gone = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return jobs_cleared_ != generation;
    };
    if (aborting_) {
      // Another Abort owns the teardown; return once it is done.
      mu_.Await(absl::Condition(&job_gone));
      return absl::OkStatus();
    }
    aborting_ = true;
    abort_reason_ = reason.empty() ? "aborted" : reason;
    Log(v1::WARNING, job_id_, rank_, -1, absl::StrCat("aborting: ", abort_reason_));
    if (trainer_for_abort_ != nullptr) trainer_for_abort_->Abort();
    // Wait for the command in flight to notice and return (a failed setup
    // clears the job itself).
    auto settled = [this, &job_gone]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return job_gone() || (phase_ != Phase::kSettingUp && phase_ != Phase::kJoining &&
                            phase_ != Phase::kRunning && phase_ != Phase::kCheckpointing &&
                            awaits_in_flight_ == 0);
    };
    mu_.Await(absl::Condition(&settled));
    if (job_gone()) return absl::OkStatus();
    trainer_for_abort_ = nullptr;
  }
  compute_.Run([&] { trainer_.reset(); });
  absl::MutexLock lock(&mu_);
  ClearJobLocked();
  return absl::OkStatus();
}

v1::WorkerStatus WorkerCore::Status() {
  absl::MutexLock lock(&mu_);
  v1::WorkerStatus status;
  status.set_job_id(job_id_);
  status.set_phase(healthy_ ? PhaseName(phase_) : "unhealthy");
  status.set_healthy(healthy_);
  status.set_health_reason(health_reason_);
  status.set_steps_done(next_step_);
  return status;
}

v1::WorkerActivity WorkerCore::Activity() {
  absl::MutexLock lock(&mu_);
  v1::WorkerActivity activity;
  activity.set_job_id(job_id_);
  activity.set_phase(PhaseName(phase_));
  activity.set_steps_done(next_step_);
  return activity;
}

bool WorkerCore::healthy() {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

std::string WorkerCore::health_reason() {
  absl::MutexLock lock(&mu_);
  return health_reason_;
}

int WorkerCore::rank() {
  absl::MutexLock lock(&mu_);
  return rank_;
}

}  // namespace tessera

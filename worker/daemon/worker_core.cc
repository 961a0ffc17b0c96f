// The worker's command state machine (see worker_core.h).
#include "worker/daemon/worker_core.h"

#include "absl/strings/str_cat.h"

namespace tessera {

WorkerCore::WorkerCore(TrainerFactory factory) : factory_(std::move(factory)) {}

WorkerCore::~WorkerCore() { Abort("", "worker shutting down").IgnoreError(); }

const char* WorkerCore::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kIdle: return "idle";
    case Phase::kSettingUp: return "setting_up";
    case Phase::kSetUp: return "set_up";
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

absl::Status WorkerCore::NoteHealth(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kDataLoss) {
    absl::MutexLock lock(&mu_);
    healthy_ = false;
    health_reason_ = status.ToString();
  }
  return status;
}

absl::StatusOr<v1::SetupJobResponse> WorkerCore::SetupJob(const v1::SetupJobRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (!healthy_) {
      return absl::UnavailableError(absl::StrCat("worker is unhealthy: ", health_reason_));
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
    job_id_ = request.job_id();
    phase_ = Phase::kSettingUp;
    next_step_ = 0;
  }
  absl::StatusOr<SetupReport> report = absl::InternalError("not run");
  compute_.Run([&] {
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = factory_();
    if (!trainer.ok()) {
      report = trainer.status();
      return;
    }
    trainer_ = std::move(*trainer);
    {
      absl::MutexLock lock(&mu_);
      trainer_for_abort_ = trainer_.get();
    }
    report = trainer_->Setup(request.spec(), request.rank(), request.world_size());
    if (!report.ok()) {
      {
        absl::MutexLock lock(&mu_);
        trainer_for_abort_ = nullptr;
      }
      trainer_.reset();
    }
  });
  absl::MutexLock lock(&mu_);
  if (!report.ok()) {
    phase_ = Phase::kIdle;
    job_id_.clear();
    mu_.Unlock();
    NoteHealth(report.status()).IgnoreError();
    mu_.Lock();
    return report.status();
  }
  phase_ = Phase::kSetUp;
  v1::SetupJobResponse response;
  response.set_shard_parameters(report->shard_parameters);
  response.set_total_parameters(report->total_parameters);
  return response;
}

absl::Status WorkerCore::InitCollective(const std::string& job_id, RendezvousStore* store,
                                        const std::string& host, absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Expect("InitCollective", job_id, Phase::kSetUp); !s.ok()) return s;
    phase_ = Phase::kSettingUp;
  }
  absl::Status status;
  compute_.Run([&] { status = trainer_->InitCollective(store, host, timeout); });
  {
    absl::MutexLock lock(&mu_);
    phase_ = status.ok() ? Phase::kReady : Phase::kSetUp;
  }
  return NoteHealth(status);
}

absl::Status WorkerCore::RunSteps(const std::string& job_id, int first_step, int num_steps,
                                  const std::function<void(const StepReport&)>& on_step) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Expect("RunSteps", job_id, Phase::kReady); !s.ok()) return s;
    if (num_steps < 0) return absl::InvalidArgumentError("num_steps: must be >= 0");
    if (first_step != next_step_) {
      return absl::FailedPreconditionError(
          absl::StrCat("RunSteps for ", job_id, ": steps must be consecutive; next step is ",
                       next_step_, ", asked for ", first_step));
    }
    phase_ = Phase::kRunning;
  }
  absl::Status status;
  for (int step = first_step; step < first_step + num_steps; ++step) {
    {
      absl::MutexLock lock(&mu_);
      if (aborting_) {
        status = absl::CancelledError(absl::StrCat("job ", job_id, " aborted: ", abort_reason_));
        break;
      }
    }
    absl::StatusOr<StepReport> report = absl::InternalError("not run");
    compute_.Run([&] { report = trainer_->RunStep(step); });
    if (!report.ok()) {
      status = report.status();
      break;
    }
    {
      absl::MutexLock lock(&mu_);
      next_step_ = step + 1;
    }
    on_step(*report);
  }
  {
    absl::MutexLock lock(&mu_);
    phase_ = Phase::kReady;
    if (aborting_ && !status.ok() && status.code() != absl::StatusCode::kCancelled) {
      status = absl::CancelledError(absl::StrCat("job ", job_id, " aborted: ", abort_reason_));
    }
  }
  return NoteHealth(status);
}

absl::StatusOr<std::string> WorkerCore::Checkpoint(const std::string& job_id, int step,
                                                   const std::string& dir) {
  {
    absl::MutexLock lock(&mu_);
    Phase want = phase_ == Phase::kSetUp ? Phase::kSetUp : Phase::kReady;
    if (absl::Status s = Expect("Checkpoint", job_id, want); !s.ok()) return s;
    if (dir.empty()) return absl::InvalidArgumentError("dir: must be set");
    phase_ = Phase::kCheckpointing;
    // Remember where to return to.
    next_phase_after_checkpoint_ = want;
  }
  absl::StatusOr<std::string> path = absl::InternalError("not run");
  compute_.Run([&] { path = trainer_->Checkpoint(step, dir); });
  {
    absl::MutexLock lock(&mu_);
    phase_ = next_phase_after_checkpoint_;
  }
  if (!path.ok()) NoteHealth(path.status()).IgnoreError();
  return path;
}

absl::Status WorkerCore::Abort(const std::string& job_id, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (job_id_.empty()) return absl::OkStatus();
    if (!job_id.empty() && job_id != job_id_) return absl::OkStatus();
    if (!aborting_) {
      aborting_ = true;
      abort_reason_ = reason.empty() ? "aborted" : reason;
      if (trainer_for_abort_ != nullptr) trainer_for_abort_->Abort();
    }
    // Wait for the command in flight to notice and return.
    auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return phase_ != Phase::kSettingUp && phase_ != Phase::kRunning &&
             phase_ != Phase::kCheckpointing;
    };
    mu_.Await(absl::Condition(&settled));
    if (job_id_.empty()) return absl::OkStatus();  // another Abort finished the job
    trainer_for_abort_ = nullptr;
  }
  compute_.Run([&] { trainer_.reset(); });
  absl::MutexLock lock(&mu_);
  job_id_.clear();
  phase_ = Phase::kIdle;
  aborting_ = false;
  next_step_ = 0;
  return absl::OkStatus();
}

v1::WorkerStatus WorkerCore::Status() {
  absl::MutexLock lock(&mu_);
  v1::WorkerStatus status;
  status.set_job_id(job_id_);
  status.set_phase(healthy_ ? PhaseName(phase_) : "unhealthy");
  status.set_healthy(healthy_);
  status.set_health_reason(health_reason_);
  return status;
}

bool WorkerCore::healthy() {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

std::string WorkerCore::health_reason() {
  absl::MutexLock lock(&mu_);
  return health_reason_;
}

}  // namespace tessera

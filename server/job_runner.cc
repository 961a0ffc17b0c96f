// One job's command sequence across its ranks (see job_runner.h).
#include "server/job_runner.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/parallelism.h"
#include "common/status_macros.h"
#include "common/checkpoint_size.h"
#include "common/fp8_numerics.h"
#include "common/memory_estimate.h"
#include "common/shadow_gap.h"
#include "server/checkpoint_commit.h"
#include "server/checkpoint_space.h"
#include "server/spec_validation.h"

namespace tessera {
namespace {

// A wait for the previous checkpoint's write that a commit warns about.
constexpr double kWaitWorthAWarningS = 0.5;

}  // namespace

JobRunner::JobRunner(std::string job_id, v1::JobSpec spec, std::vector<std::string> worker_ids,
                     std::vector<std::unique_ptr<WorkerConnection>> connections,
                     std::string rendezvous_address, absl::Duration collective_timeout,
                     JobRunnerCallbacks callbacks, JobAttempt attempt,
                     StragglerOptions straggler)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      worker_ids_(std::move(worker_ids)),
      connections_(std::move(connections)),
      rendezvous_address_(std::move(rendezvous_address)),
      collective_timeout_(collective_timeout),
      step_timeout_(absl::Seconds(spec_.step_timeout_s() > 0 ? spec_.step_timeout_s()
                                                              : kDefaultStepTimeoutSeconds)),
      callbacks_(std::move(callbacks)),
      attempt_(attempt),
      checkpoint_bytes_(EstimateCheckpointSize(spec_).total_bytes),
      free_bytes_(callbacks_.checkpoint_free_bytes ? callbacks_.checkpoint_free_bytes
                                                   : FreeBytesUnder),
      straggler_(static_cast<int>(worker_ids_.size()), straggler) {}

bool JobRunner::stopped() {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void JobRunner::Stop(v1::JobState state, const std::string& reason, absl::StatusCode cause,
                     const std::string& lost_worker) {
  {
    absl::MutexLock lock(&mu_);
    if (!lost_worker.empty()) lost_workers_.insert(lost_worker);
    if (stopped_) return;
    stopped_ = true;
    stop_outcome_ = JobOutcome();
    stop_outcome_.state = state;
    stop_outcome_.reason = reason;
    stop_outcome_.cause = state == v1::FAILED ? cause : absl::StatusCode::kCancelled;
  }
  for (auto& connection : connections_) connection->CancelInFlight();
}

std::vector<absl::Status> JobRunner::AbortAll(const std::string& reason) {
  std::vector<absl::Status> results(connections_.size());
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < connections_.size(); ++rank) {
    {
      absl::MutexLock lock(&mu_);
      if (lost_workers_.count(worker_ids_[rank]) > 0) {
        results[rank] = absl::UnavailableError("worker lost");
        continue;
      }
    }
    threads.emplace_back([&results, rank, this, reason] {
      v1::AbortRequest request;
      request.set_job_id(job_id_);
      request.set_reason(reason);
      results[rank] = connections_[rank]->Abort(request);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void JobRunner::FailCommand(const std::string& command, int rank, const absl::Status& status) {
  if (stopped()) return;
  v1::WorkerError error;
  error.set_worker_id(worker_ids_[rank]);
  error.set_rank(rank);
  error.set_code(StatusCodeName(status.code()));
  error.set_message(std::string(status.message()));
  if (callbacks_.on_worker_error) callbacks_.on_worker_error(error);
  Stop(v1::FAILED,
       absl::StrCat(command, " failed on worker ", worker_ids_[rank], " (rank ", rank, "): ",
                    error.code(), ": ", error.message()),
       status.code());
}

absl::Status JobRunner::FanOut(const std::string& command,
                               const std::function<absl::Status(int rank)>& fn,
                               int* failed_rank) {
  const int world = static_cast<int>(connections_.size());
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = fn(rank);
      if (!results[rank].ok() && failed_rank == nullptr) FailCommand(command, rank, results[rank]);
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    if (results[rank].ok()) continue;
    if (failed_rank != nullptr) *failed_rank = rank;
    return results[rank];
  }
  return stopped() ? absl::CancelledError("job stopped") : absl::OkStatus();
}

void JobRunner::SkipCheckpoint(int step, int64_t needed, int64_t available,
                               const std::string& reason) {
  v1::CheckpointSkipped skipped;
  skipped.set_step(step);
  skipped.set_bytes_needed(needed);
  skipped.set_bytes_available(available);
  skipped.set_reason(reason);
  if (callbacks_.on_checkpoint_skipped) callbacks_.on_checkpoint_skipped(skipped);
}

void JobRunner::OnStepResult(const v1::StepResult& result) {
  v1::StepMetrics done;
  v1::Fp8Numerics numerics;
  std::vector<StragglerChange> slow_rank_changes;
  {
    absl::MutexLock lock(&mu_);
    if (result.step() < first_unfinished_step_ || result.step() >= spec_.steps()) return;
    auto it = partial_.try_emplace(result.step()).first;
    Partial& p = it->second;
    const int world = static_cast<int>(connections_.size());
    if (p.reported.empty()) {
      p.reported.assign(world, false);
      p.compute_s.assign(world, 0.0);
    }
    if (result.rank() < 0 || result.rank() >= world || p.reported[result.rank()]) return;
    p.reported[result.rank()] = true;
    // The rank's own work: its step time less what it waited for its peers
    // in collectives (a slow peer makes the others wait, not work).
    p.compute_s[result.rank()] =
        std::max(0.0, result.compute_time_s() - result.phases().collective_s());
    v1::StepMetrics& m = p.metrics;
    if (p.ranks == 0 || result.rank() == 0) {
      m.set_loss(result.loss());
      m.set_grad_norm(result.grad_norm());
      m.set_lr(result.lr());
    }
    m.set_step(result.step());
    m.set_tokens(m.tokens() + result.tokens());
    if (result.fp8_stats_size() > 0) AddRankNumerics(result.fp8_stats(), p.numerics);
    // Already all-reduced by the workers: every rank reports the same value.
    if (result.has_validation() && (!m.has_validation() || result.rank() == 0)) {
      *m.mutable_validation() = result.validation();
    }
    // The shadow losses are global too; its time is the slowest rank's, and
    // the warning is the coordinator's, from the job's threshold.
    if (result.has_shadow()) {
      const double slowest = std::max(m.shadow().time_s(), result.shadow().time_s());
      if (!m.has_shadow() || result.rank() == 0) *m.mutable_shadow() = result.shadow();
      m.mutable_shadow()->set_time_s(slowest);
      m.mutable_shadow()->set_warning(
          ShadowGapWarning(spec_.fp8(), m.shadow().fp8_loss(), m.shadow().bf16_loss()));
    }
    // Memory: the fullest rank's.
    if (p.ranks == 0 || result.peak_memory_bytes() > m.peak_memory_bytes()) {
      m.set_peak_memory_bytes(result.peak_memory_bytes());
      m.set_peak_memory_rank(result.rank());
    }
    // The step's time and its phases are the slowest rank's.
    if (p.ranks == 0 || result.compute_time_s() > m.step_time_s()) {
      m.set_step_time_s(result.compute_time_s());
      *m.mutable_phases() = result.phases();
    }
    if (++p.ranks < world) return;
    absl::Time now = absl::Now();
    double interval = absl::ToDoubleSeconds(now - last_step_done_);
    last_step_done_ = now;
    // The first step after a checkpoint shows what training waited for.
    double checkpoint_s = 0;
    if (checkpoint_phases_.step == result.step()) {
      m.mutable_phases()->set_checkpoint_wait_s(checkpoint_phases_.wait_s);
      m.mutable_phases()->set_checkpoint_snapshot_s(checkpoint_phases_.snapshot_s);
      checkpoint_s = checkpoint_phases_.wait_s + checkpoint_phases_.snapshot_s;
      checkpoint_phases_ = {};
    }
    // The shadow loss's forwards are the workers' time, not the coordinator's.
    m.set_control_overhead_s(
        std::max(0.0, interval - m.step_time_s() - checkpoint_s - m.shadow().time_s()));
    if (m.step_time_s() > 0) m.set_tokens_per_s(static_cast<double>(m.tokens()) / m.step_time_s());
    m.set_attempt(attempt_.number);
    done = m;
    if (p.numerics.tensors_size() > 0) {
      numerics = std::move(p.numerics);
      numerics.set_step(result.step());
      numerics.set_attempt(attempt_.number);
      SetFractions(numerics);
    }
    slow_rank_changes = straggler_.AddStep(result.step(), p.compute_s);
    partial_.erase(it);
    first_unfinished_step_ = std::max(first_unfinished_step_, result.step() + 1);
    ++steps_done_;
  }
  if (callbacks_.on_step) callbacks_.on_step(done);
  if (numerics.tensors_size() > 0 && callbacks_.on_numerics) callbacks_.on_numerics(numerics);
  if (callbacks_.on_slow_rank) {
    for (const StragglerChange& change : slow_rank_changes) callbacks_.on_slow_rank(change);
  }
}

absl::Status JobRunner::CheckpointNow() { return RequestBoundary(BoundaryAction::kCheckpoint, ""); }

absl::Status JobRunner::Suspend(const std::string& reason) {
  return RequestBoundary(BoundaryAction::kSuspend, reason);
}

absl::Status JobRunner::RequestBoundary(BoundaryAction action, const std::string& reason) {
  if (spec_.checkpoint().dir().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, " has no checkpoint.dir to write a checkpoint into"));
  }
  absl::MutexLock lock(&mu_);
  if (stopped_ || ended_) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id_, "'s attempt has ended"));
  }
  if (action > boundary_action_) boundary_action_ = action;
  if (action == BoundaryAction::kSuspend && suspend_reason_.empty()) suspend_reason_ = reason;
  return absl::OkStatus();
}

JobRunner::BoundaryAction JobRunner::TakeBoundaryAction() {
  absl::MutexLock lock(&mu_);
  return std::exchange(boundary_action_, BoundaryAction::kNone);
}

bool JobRunner::TakeSuspend() {
  absl::MutexLock lock(&mu_);
  if (boundary_action_ != BoundaryAction::kSuspend) return false;
  boundary_action_ = BoundaryAction::kNone;
  return true;
}

void JobRunner::EndChunkWhenAsked(int first_step) {
  {
    absl::MutexLock lock(&mu_);
    auto asked = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopped_ || !chunk_running_ || boundary_action_ != BoundaryAction::kNone;
    };
    mu_.Await(absl::Condition(&asked));
    if (stopped_ || !chunk_running_) return;
  }
  // Each rank holds before the first step it has not begun; none has begun
  // the largest of those, so every rank can stop there.
  std::vector<int> next_steps(connections_.size(), first_step);
  absl::Status s = FanOut("HoldSteps", [&](int rank) -> absl::Status {
    v1::HoldStepsRequest request;
    request.set_job_id(job_id_);
    ASSIGN_OR_RETURN(next_steps[rank], connections_[rank]->HoldSteps(request));
    return absl::OkStatus();
  });
  if (!s.ok()) return;
  int end = 0;
  {
    absl::MutexLock lock(&mu_);
    end = std::min(chunk_end_, std::max(first_step + 1, *std::max_element(next_steps.begin(),
                                                                          next_steps.end())));
  }
  s = FanOut("EndChunkAt", [&](int rank) {
    v1::EndChunkAtRequest request;
    request.set_job_id(job_id_);
    request.set_step(end);
    return connections_[rank]->EndChunkAt(request);
  });
  if (!s.ok()) return;
  absl::MutexLock lock(&mu_);
  chunk_end_ = end;
}

absl::StatusOr<int> JobRunner::RunChunk(int first_step, int num_steps) {
  {
    absl::MutexLock lock(&mu_);
    last_step_done_ = absl::Now();
    chunk_running_ = true;
    chunk_end_ = first_step + num_steps;
  }
  std::thread watchdog([this] { WatchSteps(); });
  std::thread chunk_ender([this, first_step] { EndChunkWhenAsked(first_step); });
  absl::Status s = FanOut("RunSteps", [&](int rank) {
    v1::RunStepsRequest request;
    request.set_job_id(job_id_);
    request.set_first_step(first_step);
    request.set_num_steps(num_steps);
    return connections_[rank]->RunSteps(
        request, [this](const v1::StepResult& r) { OnStepResult(r); });
  });
  {
    absl::MutexLock lock(&mu_);
    chunk_running_ = false;
  }
  watchdog.join();
  // Before the next chunk starts: an EndChunkAt for this one must not reach it.
  chunk_ender.join();
  RETURN_IF_ERROR(s);
  absl::MutexLock lock(&mu_);
  return chunk_end_;
}

void JobRunner::WatchSteps() {
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      const int64_t seen = steps_done_;
      const absl::Time deadline = absl::Now() + step_timeout_;
      auto progressed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopped_ || !chunk_running_ || steps_done_ != seen;
      };
      if (mu_.AwaitWithDeadline(absl::Condition(&progressed), deadline)) {
        if (stopped_ || !chunk_running_) return;
        continue;  // a step completed: the clock starts again
      }
      // No step completed in time: name the step and the ranks it waits on.
      const int step = first_unfinished_step_;
      std::string missing;
      auto it = partial_.find(step);
      for (int rank = 0; rank < static_cast<int>(connections_.size()); ++rank) {
        if (it != partial_.end() && it->second.reported[rank]) continue;
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", "rank ", rank, " (",
                        worker_ids_[rank], ")");
      }
      reason = absl::StrCat("step watchdog: no step completed for ",
                            absl::FormatDuration(step_timeout_), " (step_timeout_s); step ",
                            step, " is waiting on ", missing);
      break;
    }
  }
  Stop(v1::FAILED, reason, absl::StatusCode::kDeadlineExceeded);
}

void JobRunner::FailCheckpoint(int step, const absl::Status& status) {
  Stop(v1::FAILED,
       absl::StrCat("checkpoint of step ", step, " under ", spec_.checkpoint().dir(), ": ",
                    StatusCodeName(status.code()), ": ", status.message()),
       status.code());
}

JobRunner::CheckpointStart JobRunner::StartCheckpoint(int step, double waited_s,
                                                      v1::CheckpointCommitted& record) {
  const std::string& root = spec_.checkpoint().dir();
  auto fail = [&](const absl::Status& s) {
    FailCheckpoint(step, s);
    return CheckpointStart::kFailed;
  };
  // Room first: the steps keep_last would prune anyway go before a
  // checkpoint that does not fit; one that still does not fit is skipped,
  // unless it is the last.
  const int64_t needed = checkpoint_bytes_;
  absl::StatusOr<CheckpointRoom> room =
      MakeRoomForCheckpoint(root, step, needed, spec_.checkpoint().keep_last(), free_bytes_);
  if (!room.ok()) return fail(room.status());
  if (!room->fits()) {
    const std::string why = absl::StrCat(
        "the checkpoint of step ", step, " needs ", needed, " bytes (",
        FormatBytesAsGiB(needed), ") under ", root, ", but only ", room->available, " bytes (",
        FormatBytesAsGiB(room->available), ") are available",
        spec_.checkpoint().keep_last() > 0 ? " after pruning to checkpoint.keep_last" : "");
    if (step == spec_.steps()) {
      return fail(absl::ResourceExhaustedError(absl::StrCat("final checkpoint: ", why)));
    }
    SkipCheckpoint(step, needed, room->available, absl::StrCat(why, "; skipped, training goes on"));
    return CheckpointStart::kSkipped;
  }
  // Leftovers of an earlier attempt at this step must not mix with this one.
  if (absl::Status s = PrepareStep(root, step); !s.ok()) return fail(s);
  const int world = static_cast<int>(connections_.size());
  record = v1::CheckpointCommitted();
  record.set_step(step);
  for (int rank = 0; rank < world; ++rank) record.add_ranks()->set_rank(rank);
  absl::Status s = FanOut("Checkpoint", [&](int rank) -> absl::Status {
    v1::CheckpointRequest request;
    request.set_job_id(job_id_);
    request.set_step(step);
    request.set_dir(root);
    ASSIGN_OR_RETURN(const v1::CheckpointResponse response, connections_[rank]->Checkpoint(request));
    v1::RankCheckpointWrite& r = *record.mutable_ranks(rank);
    r.set_bytes(response.bytes());
    r.set_wait_s(response.wait_s());
    r.set_snapshot_s(response.snapshot_s());
    r.set_background(response.background());
    return absl::OkStatus();
  });
  if (!s.ok()) {
    // Never committed, so never loaded; removed so no partial step remains.
    DiscardStep(root, step).IgnoreError();
    return CheckpointStart::kFailed;
  }
  // What training waited for: the previous commit (its writes), then the
  // slowest rank's own wait and copy (for a rank that could not hold a
  // snapshot, its whole write).
  double wait = 0, snapshot = 0;
  for (const v1::RankCheckpointWrite& r : record.ranks()) {
    if (r.wait_s() + r.snapshot_s() > wait + snapshot) {
      wait = r.wait_s();
      snapshot = r.snapshot_s();
    }
  }
  wait += waited_s;
  record.set_stall_s(wait + snapshot);
  if (wait >= kWaitWorthAWarningS) {
    int previous = 0;
    double prune_s = 0;
    {
      absl::MutexLock lock(&mu_);
      previous = committed_step_;
      prune_s = last_prune_s_;
    }
    const std::string pruning =
        prune_s >= kWaitWorthAWarningS
            ? absl::StrFormat(" and the removal of older steps under checkpoint.keep_last "
                              "(%.1f s)",
                              prune_s)
            : std::string();
    const int interval = spec_.checkpoint().interval_steps();
    if (interval > 0 && step % interval == 0 && step < spec_.steps()) {
      record.set_warning(absl::StrFormat(
          "training waited %.2f s for the previous checkpoint's write%s: "
          "checkpoint.interval_steps (%d) is shorter than a write takes; raise it, or expect "
          "this stall at every checkpoint",
          wait, pruning, interval));
    } else {
      // The final checkpoint, or one asked for: the interval is not to blame.
      record.set_warning(absl::StrFormat(
          "this checkpoint came %d step%s after the previous one (step %d) and waited %.2f s "
          "for its write%s%s",
          step - previous, step - previous == 1 ? "" : "s", previous, wait, pruning,
          step == spec_.steps() ? "; training had ended, the job completes once it is written"
                                : ""));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    checkpoint_phases_ = {step, wait, snapshot};
  }
  return CheckpointStart::kStarted;
}

void JobRunner::FinishCheckpoint(v1::CheckpointCommitted record, absl::Time started) {
  const std::string& root = spec_.checkpoint().dir();
  const int step = record.step();
  int failed_rank = 0;
  absl::Status s = FanOut("AwaitCheckpoint", [&](int rank) -> absl::Status {
    v1::AwaitCheckpointRequest request;
    request.set_job_id(job_id_);
    request.set_step(step);
    ASSIGN_OR_RETURN(const v1::AwaitCheckpointResponse written,
                     connections_[rank]->AwaitCheckpoint(request));
    v1::RankCheckpointWrite& r = *record.mutable_ranks(rank);
    r.set_bytes(written.bytes());
    r.set_write_s(written.write_s());
    if (written.write_s() > 0) r.set_write_gb_per_s(written.bytes() / written.write_s() / 1e9);
    return absl::OkStatus();
  }, &failed_rank);
  if (!s.ok() && stopped()) return;  // the job is ending: Run's finish salvages or discards it
  if (!s.ok()) {
    DiscardStep(root, step).IgnoreError();
    {
      absl::MutexLock lock(&mu_);
      pending_commit_step_ = -1;
    }
    // A disk that filled during the write costs this checkpoint, not the
    // run; the final checkpoint must land, so its failure fails the job.
    if (s.code() == absl::StatusCode::kResourceExhausted && step < spec_.steps()) {
      absl::StatusOr<int64_t> available = free_bytes_(root);
      SkipCheckpoint(step, checkpoint_bytes_, available.value_or(-1),
                     absl::StrCat("rank ", failed_rank, " (", worker_ids_[failed_rank],
                                  ") could not write the checkpoint of step ", step, ": ",
                                  s.message(), "; skipped, training goes on"));
      return;
    }
    FailCommand("AwaitCheckpoint", failed_rank, s);
    return;
  }
  // Every rank wrote its files: only now does the step count.
  // Under hybrid sharding only the first shard group writes files.
  Commit(std::move(record), started);
}

bool JobRunner::Commit(v1::CheckpointCommitted record, absl::Time started) {
  const std::string& root = spec_.checkpoint().dir();
  const int step = record.step();
  {
    absl::MutexLock lock(&mu_);
    pending_commit_step_ = -1;
  }
  if (absl::Status c = CommitStep(root, step, CheckpointRanks(spec_)); !c.ok()) {
    DiscardStep(root, step).IgnoreError();
    FailCheckpoint(step, c);
    return false;
  }
  int64_t bytes = 0;
  for (const v1::RankCheckpointWrite& r : record.ranks()) bytes += r.bytes();
  record.set_bytes(bytes);
  record.set_write_s(absl::ToDoubleSeconds(absl::Now() - started));
  {
    absl::MutexLock lock(&mu_);
    committed_step_ = step;
  }
  PruneAfterCommit(step, record);
  if (callbacks_.on_commit) callbacks_.on_commit(record);
  return true;
}

void JobRunner::PruneAfterCommit(int step, v1::CheckpointCommitted& record) {
  const absl::Time started = absl::Now();
  const absl::Status s = PruneSteps(spec_.checkpoint().dir(), step, spec_.checkpoint().keep_last());
  record.set_prune_s(absl::ToDoubleSeconds(absl::Now() - started));
  {
    absl::MutexLock lock(&mu_);
    last_prune_s_ = record.prune_s();
  }
  if (!s.ok()) {
    std::string warning = record.warning();
    if (!warning.empty()) warning += "; ";
    absl::StrAppend(&warning, "removing the steps checkpoint.keep_last no longer keeps failed (",
                    StatusCodeName(s.code()), ": ", s.message(),
                    "): they stay on disk; the commit of step ", step, " stands");
    record.set_warning(warning);
  }
}

void JobRunner::SalvagePendingCheckpoint() {
  int step = -1;
  {
    absl::MutexLock lock(&mu_);
    step = pending_commit_step_;
    pending_commit_step_ = -1;
  }
  if (step < 0) return;
  // Every rank whose write finished left its manifest, written last (after
  // its files were fsynced); when all of them are there the step is
  // complete and CommitStep commits it, so a restart resumes from it.
  // Otherwise the partial step goes.
  const std::string& root = spec_.checkpoint().dir();
  if (CommitStep(root, step, CheckpointRanks(spec_)).ok()) {
    absl::MutexLock lock(&mu_);
    committed_step_ = step;
  } else {
    DiscardStep(root, step).IgnoreError();
    return;
  }
  v1::CheckpointCommitted record;
  record.set_step(step);
  PruneAfterCommit(step, record);
  if (callbacks_.on_commit) callbacks_.on_commit(record);
}

JobOutcome JobRunner::Run() {
  const int world = static_cast<int>(connections_.size());
  JobOutcome outcome;
  // checkpoint.resume_from names a committed step; the workers load it. A
  // restarted attempt was told its step by the coordinator.
  int first_step = attempt_.resume_step;
  // The commit of the checkpoint whose files are being written while the
  // next steps run (at most one: the workers' next checkpoint waits for
  // their previous write).
  std::thread committer;
  auto finish = [&]() {
    if (committer.joinable()) committer.join();
    // Before the Aborts stop any write still going.
    SalvagePendingCheckpoint();
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      if (stopped_) outcome = stop_outcome_;
    }
    const std::vector<absl::Status> aborts = AbortAll(outcome.reason);
    for (int rank = 0; rank < world; ++rank) {
      if (aborts[rank].ok()) {
        outcome.idle_workers.push_back(worker_ids_[rank]);
      } else if (aborts[rank].code() == absl::StatusCode::kUnavailable) {
        outcome.unreachable_workers.push_back(worker_ids_[rank]);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      outcome.committed_step = committed_step_;
    }
    outcome.first_step = std::max(0, first_step);
    return outcome;
  };

  if (first_step < 0) {
    absl::StatusOr<int> resume = ResolveResumeStep(spec_.checkpoint(), spec_.steps());
    if (!resume.ok()) {
      Stop(v1::FAILED,
           absl::StrCat("checkpoint.resume_from: ", StatusCodeName(resume.status().code()), ": ",
                        resume.status().message()),
           resume.status().code());
      return finish();
    }
    first_step = *resume;
  }
  {
    absl::MutexLock lock(&mu_);
    first_unfinished_step_ = first_step;
  }
  if (callbacks_.on_state) {
    std::string where;
    if (first_step > 0) {
      where = absl::StrCat(", resuming from step ", first_step);
      // A declared change, such as another FP8 recipe, is part of the record.
      if (const std::string change = DescribeResumeChange(spec_, first_step); !change.empty()) {
        absl::StrAppend(&where, ": ", change);
      }
    } else if (attempt_.number > 0) {
      where = ", starting again from step 0 (no checkpoint committed)";
    }
    callbacks_.on_state(
        v1::STARTING,
        absl::StrCat(attempt_.number > 0 ? absl::StrCat("attempt ", attempt_.number + 1, ": ")
                                         : "",
                     "setting up shards on ", world, " workers", where));
  }
  absl::Status s = FanOut("SetupJob", [&](int rank) {
    v1::SetupJobRequest request;
    request.set_job_id(job_id_);
    *request.mutable_spec() = spec_;
    request.set_rank(rank);
    request.set_world_size(world);
    request.set_resume_step(first_step);
    return connections_[rank]->SetupJob(request).status();
  });
  if (!s.ok()) return finish();

  s = FanOut("InitCollective", [&](int rank) {
    v1::InitCollectiveRequest request;
    request.set_job_id(job_id_);
    request.set_rendezvous_address(rendezvous_address_);
    request.set_timeout_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(collective_timeout_)));
    return connections_[rank]->InitCollective(request);
  });
  if (!s.ok()) return finish();
  if (stopped()) return finish();
  if (callbacks_.on_state) callbacks_.on_state(v1::RUNNING, "training");

  const int steps = spec_.steps();
  const int interval = spec_.checkpoint().dir().empty() ? 0 : spec_.checkpoint().interval_steps();
  int step = first_step;
  while (step < steps) {
    int end = steps;
    if (interval > 0) end = std::min(steps, (step / interval + 1) * interval);
    absl::StatusOr<int> reached = RunChunk(step, end - step);
    if (!reached.ok()) return finish();
    step = *reached;
    // What was asked for before this boundary is served here; a checkpoint
    // asked for while this one is written gets one of its own.
    const BoundaryAction asked = step < steps ? TakeBoundaryAction() : BoundaryAction::kNone;
    const bool checkpoint = !spec_.checkpoint().dir().empty() &&
                            (interval > 0 || step == steps || asked != BoundaryAction::kNone);
    if (checkpoint) {
      const absl::Time started = absl::Now();
      // At most one checkpoint in flight: the previous one's writes end (and
      // it is committed and pruned) before this one is measured and taken.
      // The ranks would wait for their previous write anyway; this wait is
      // reported as the checkpoint's wait phase.
      double waited_s = 0;
      if (committer.joinable()) {
        committer.join();
        waited_s = absl::ToDoubleSeconds(absl::Now() - started);
      }
      if (stopped()) return finish();
      v1::CheckpointCommitted record;
      const CheckpointStart start = StartCheckpoint(step, waited_s, record);
      if (start == CheckpointStart::kFailed) return finish();
      if (start == CheckpointStart::kStarted) {
        {
          absl::MutexLock lock(&mu_);
          pending_commit_step_ = step;
        }
        committer = std::thread([this, record = std::move(record), started]() mutable {
          FinishCheckpoint(std::move(record), started);
        });
      }
    }
    if (asked == BoundaryAction::kSuspend || (checkpoint && step < steps && TakeSuspend())) {
      // The workers are released only once the checkpoint is committed.
      if (committer.joinable()) committer.join();
      if (stopped()) return finish();
      outcome.state = v1::SUSPENDED;
      {
        absl::MutexLock lock(&mu_);
        outcome.reason =
          committed_step_ == step
              ? absl::StrCat("suspended at step ", step, " (checkpoint committed)")
              : absl::StrCat("suspended at step ", step, "; its checkpoint was skipped, so it ",
                             committed_step_ > 0
                                 ? absl::StrCat("resumes from step ", committed_step_)
                                 : std::string("starts again from step 0"));
        if (!suspend_reason_.empty()) absl::StrAppend(&outcome.reason, ": ", suspend_reason_);
      }
      return finish();
    }
  }
  // SUCCEEDED only once the final checkpoint is committed.
  if (committer.joinable()) committer.join();
  if (stopped()) return finish();
  outcome.state = v1::SUCCEEDED;
  outcome.reason = absl::StrCat("completed ", steps, " steps");
  return finish();
}

}  // namespace tessera

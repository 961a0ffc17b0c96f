// Phase timing of one training step (see step_clock.h).
#include "worker/trainer/step_clock.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {

v1::CollectiveWaits CollectiveWaitsProto(const StepPhaseTimes& phases) {
  const auto at = [&](CollectiveSite site) {
    return phases.collective_waits[static_cast<int>(site)];
  };
  v1::CollectiveWaits w;
  w.set_first_gather_s(at(CollectiveSite::kFirstGather));
  w.set_forward_gather_s(at(CollectiveSite::kForwardGather));
  w.set_head_gather_s(at(CollectiveSite::kHeadGather));
  w.set_backward_gather_s(at(CollectiveSite::kBackwardGather));
  w.set_gradient_buffer_s(at(CollectiveSite::kGradientBuffer));
  w.set_gradient_reduce_s(at(CollectiveSite::kGradientReduce));
  w.set_final_reduce_s(at(CollectiveSite::kFinalReduce));
  w.set_all_reduce_s(at(CollectiveSite::kAllReduce));
  return w;
}

absl::Status StepClock::Start(Stream* stream) {
  marks_ = 0;
  RETURN_IF_ERROR(ops_.MarkTime(0, stream));
  marks_ = 1;
  return absl::OkStatus();
}

absl::Status StepClock::Lap(StepPhase phase, Stream* stream) {
  if (phase == StepPhase::kCollective) {
    return absl::InvalidArgumentError("StepClock::Lap(kCollective): a wait names its site (WaitLap)");
  }
  return LapAt(phase, CollectiveSite::kFirstGather, stream);
}

absl::Status StepClock::WaitLap(CollectiveSite site, Stream* stream) {
  return LapAt(StepPhase::kCollective, site, stream);
}

absl::Status StepClock::LapAt(StepPhase phase, CollectiveSite site, Stream* stream) {
  if (marks_ == 0) return absl::FailedPreconditionError("StepClock lap before Start");
  // A lap of the same phase (and site) as the previous one extends it:
  // re-record the previous mark instead of spending a new one.
  if (marks_ >= 2 && lap_phase_[marks_ - 1] == phase && lap_site_[marks_ - 1] == site) {
    return ops_.MarkTime(marks_ - 1, stream);
  }
  if (marks_ == Ops::kTimeMarks) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a step has more than ", Ops::kTimeMarks - 1, " timed laps"));
  }
  RETURN_IF_ERROR(ops_.MarkTime(marks_, stream));
  lap_phase_[marks_] = phase;
  lap_site_[marks_] = site;
  ++marks_;
  return absl::OkStatus();
}

absl::StatusOr<StepPhaseTimes> StepClock::Finish(double wall_s) {
  if (marks_ == 0) return absl::FailedPreconditionError("StepClock::Finish before Start");
  double sums[kStepPhases] = {};
  StepPhaseTimes t;
  for (int i = 1; i < marks_; ++i) {
    ASSIGN_OR_RETURN(double lap, ops_.SecondsBetween(i - 1, i));
    lap = std::max(0.0, lap);
    sums[static_cast<int>(lap_phase_[i])] += lap;
    if (lap_phase_[i] == StepPhase::kCollective) {
      t.collective_waits[static_cast<int>(lap_site_[i])] += lap;
    }
  }
  t.forward_s = sums[static_cast<int>(StepPhase::kForward)];
  t.loss_s = sums[static_cast<int>(StepPhase::kLoss)];
  t.backward_s = sums[static_cast<int>(StepPhase::kBackward)];
  t.optimizer_s = sums[static_cast<int>(StepPhase::kOptimizer)];
  t.collective_s = sums[static_cast<int>(StepPhase::kCollective)];
  t.recompute_s = sums[static_cast<int>(StepPhase::kRecompute)];
  double timeline = 0.0;
  if (marks_ >= 2) {
    ASSIGN_OR_RETURN(timeline, ops_.SecondsBetween(0, marks_ - 1));
  }
  t.host_s = std::max(0.0, wall_s - timeline);
  finished_marks_ = marks_;
  marks_ = 0;
  return t;
}

absl::Status StepClock::Reopen() {
  if (finished_marks_ == 0) {
    return absl::FailedPreconditionError("StepClock::Reopen before any step finished");
  }
  marks_ = finished_marks_;
  return absl::OkStatus();
}

}  // namespace tessera

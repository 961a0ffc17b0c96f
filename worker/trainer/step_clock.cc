// Phase timing of one training step (see step_clock.h).
#include "worker/trainer/step_clock.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {

absl::Status StepClock::Start(Stream* stream) {
  marks_ = 0;
  RETURN_IF_ERROR(ops_.MarkTime(0, stream));
  marks_ = 1;
  return absl::OkStatus();
}

absl::Status StepClock::Lap(StepPhase phase, Stream* stream) {
  if (marks_ == 0) return absl::FailedPreconditionError("StepClock::Lap before Start");
  // A lap of the same phase as the previous one extends it: re-record the
  // previous mark instead of spending a new one.
  if (marks_ >= 2 && lap_phase_[marks_ - 1] == phase) {
    return ops_.MarkTime(marks_ - 1, stream);
  }
  if (marks_ == Ops::kTimeMarks) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a step has more than ", Ops::kTimeMarks - 1, " timed laps"));
  }
  RETURN_IF_ERROR(ops_.MarkTime(marks_, stream));
  lap_phase_[marks_] = phase;
  ++marks_;
  return absl::OkStatus();
}

absl::StatusOr<StepPhaseTimes> StepClock::Finish(double wall_s) {
  if (marks_ == 0) return absl::FailedPreconditionError("StepClock::Finish before Start");
  double sums[kStepPhases] = {};
  for (int i = 1; i < marks_; ++i) {
    ASSIGN_OR_RETURN(double lap, ops_.SecondsBetween(i - 1, i));
    sums[static_cast<int>(lap_phase_[i])] += std::max(0.0, lap);
  }
  StepPhaseTimes t;
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

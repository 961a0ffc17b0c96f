// Phase timing of one training step, as users see it in StepMetrics: the
// step's GPU timeline (on the CPU engine, the host clock) is cut by time
// marks into laps, and each lap is charged to one phase: forward, loss,
// backward, the forward recomputed in the backward, optimizer, or waiting
// on collectives. What the timeline does not
// cover (reading the batch, the launch of the first kernel, the read-back of
// the step's scalars) is host time. Marks are Ops::MarkTime events: no
// allocation, no host wait; the laps are read once, after the step's final
// synchronize. Consecutive laps of the same phase share one mark. A wait on
// collectives also names where it waited (CollectiveSite), so the step
// reports which of its collectives the overlap did not hide.
#ifndef TESSERA_WORKER_TRAINER_STEP_CLOCK_H_
#define TESSERA_WORKER_TRAINER_STEP_CLOCK_H_

#include <array>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ops/ops.h"
#include "worker/trainer/trainer.h"

namespace tessera {

enum class StepPhase { kForward = 0, kLoss, kBackward, kOptimizer, kCollective, kRecompute };
constexpr int kStepPhases = 6;

// Where a kCollective lap waited (StepPhaseTimes::collective_waits).
enum class CollectiveSite {
  kFirstGather = 0,
  kForwardGather,
  kHeadGather,
  kBackwardGather,
  kGradientBuffer,
  kGradientReduce,
  kFinalReduce,
  kAllReduce,
};
static_assert(static_cast<int>(CollectiveSite::kAllReduce) + 1 == kCollectiveSites);

// StepPhaseTimes::collective_waits as the StepPhases message reports them.
v1::CollectiveWaits CollectiveWaitsProto(const StepPhaseTimes& phases);

class StepClock {
 public:
  explicit StepClock(Ops& ops) : ops_(ops) {}

  // Opens the step's timeline at the current point of `stream`.
  absl::Status Start(Stream* stream);
  // Closes the lap since the previous mark and charges it to `phase`, one
  // of the compute phases (not kCollective: WaitLap charges those).
  absl::Status Lap(StepPhase phase, Stream* stream);
  // Closes the lap since the previous mark, a wait on collectives at `site`.
  absl::Status WaitLap(CollectiveSite site, Stream* stream);
  // Once the stream is synchronized: the phase sums, and as host time the
  // part of `wall_s` (the step's host wall time) the timeline leaves out.
  absl::StatusOr<StepPhaseTimes> Finish(double wall_s);
  // For a step replayed from a capture: the replay records again every mark
  // the captured step recorded, so the timeline to read is the last
  // finished step's. Reopens it for Finish; FAILED_PRECONDITION if no step
  // has finished.
  absl::Status Reopen();

 private:
  Ops& ops_;
  int marks_ = 0;  // marks recorded since Start
  int finished_marks_ = 0;  // marks of the last step Finish read
  absl::Status LapAt(StepPhase phase, CollectiveSite site, Stream* stream);

  // lap_phase_[i]: the phase of the lap that ends at mark i (i >= 1), and
  // for a kCollective lap, lap_site_[i] where it waited.
  std::array<StepPhase, Ops::kTimeMarks> lap_phase_{};
  std::array<CollectiveSite, Ops::kTimeMarks> lap_site_{};
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_STEP_CLOCK_H_

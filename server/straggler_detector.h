// Names the slow rank of a job: one GPU throttling, a bad link or a noisy
// neighbour slows the whole gang, because every rank waits for it in the
// step's collectives. What each rank reports is therefore compared by its
// own work: its compute time per step, the step time less the time it
// waited on collectives (the fast ranks spend the slow one's extra time
// waiting, so their step times all look alike).
//
// The rule, for a job of two or more ranks, decided after every step once
// `window_steps` steps are in:
//   - each rank's figure is the median of its compute times over the last
//     window_steps steps (a median, so a few steps that the OS scheduler or
//     a checkpoint delayed do not count);
//   - the reference is the median rank's figure: the middle one when the
//     ranks are ordered by it, the faster of the two middle ones for an even
//     number of ranks (so with two ranks the slow one is held against the
//     fast one, not against their average);
//   - a rank is named slow when its figure is more than `threshold` above
//     the reference (threshold 0.1: more than 10% slower), i.e. when more
//     than half of its steps in the window were that slow (medians of an
//     even count are the lower of the two middle values throughout);
//   - a named rank is cleared when its figure falls back to at most half the
//     threshold above the reference; between the two it stays as it is, so
//     a rank near the threshold does not flap.
// Each change is reported once: naming a rank, and clearing it.
// A one-rank job has nothing to compare with and never names anything.
// The detector lives for one attempt of a job: a restarted or resumed job
// starts a fresh window on its new gang.
//
// No gRPC or proto types: the runner feeds it and turns its changes into
// job events.
#ifndef TESSERA_SERVER_STRAGGLER_DETECTOR_H_
#define TESSERA_SERVER_STRAGGLER_DETECTOR_H_

#include <deque>
#include <vector>

#include "absl/status/status.h"

namespace tessera {

struct StragglerOptions {
  // How much slower than the median rank, as a fraction, names a rank.
  double threshold = 0.10;
  // How many of the latest steps each rank's figure covers.
  int window_steps = 50;
};

// The coordinator's bounds: threshold in [0.01, 10], window_steps in
// [5, 100000]. INVALID_ARGUMENT naming the field (slow_rank_threshold,
// slow_rank_window_steps) and the reason.
absl::Status ValidateStragglerOptions(const StragglerOptions& options);

// A rank named slow (slow = true) or cleared (slow = false) after `step`.
struct StragglerChange {
  int rank = 0;
  bool slow = false;
  int step = 0;                 // the window's last step
  int window_steps = 0;         // steps the figures cover
  double rank_compute_s = 0;    // the rank's median compute time per step
  double median_compute_s = 0;  // the median rank's
  // rank_compute_s / median_compute_s - 1: 0.25 is 25% slower.
  double slowdown = 0;
};

// Not thread-safe: the runner calls it under its own lock.
class StragglerDetector {
 public:
  StragglerDetector(int world_size, StragglerOptions options);

  // One completed step: every rank's compute time (seconds; index = rank).
  // Returns the ranks named or cleared by it, in rank order. A vector of
  // the wrong size is ignored (no change).
  std::vector<StragglerChange> AddStep(int step, const std::vector<double>& compute_s);

  // The ranks named now, with the figures of the latest step.
  std::vector<StragglerChange> Slow() const;

 private:
  const int world_size_;
  const StragglerOptions options_;
  std::vector<std::deque<double>> windows_;  // per rank, the latest window_steps times
  std::vector<bool> named_;                   // per rank
  std::vector<StragglerChange> latest_;       // per rank, as of the latest step
};

}  // namespace tessera

#endif  // TESSERA_SERVER_STRAGGLER_DETECTOR_H_

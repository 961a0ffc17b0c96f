// The slow-rank rule (see straggler_detector.h).
#include "server/straggler_detector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr double kMinThreshold = 0.01;
constexpr double kMaxThreshold = 10.0;
constexpr int kMinWindowSteps = 5;
constexpr int kMaxWindowSteps = 100000;

// The lower median: the middle element, the smaller of the two middle ones
// for an even count. `values` is reordered.
double LowerMedian(std::vector<double>& values) {
  const size_t middle = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  return values[middle];
}

}  // namespace

absl::Status ValidateStragglerOptions(const StragglerOptions& options) {
  if (!std::isfinite(options.threshold) || options.threshold < kMinThreshold ||
      options.threshold > kMaxThreshold) {
    return absl::InvalidArgumentError(
        absl::StrCat("slow_rank_threshold: must be a fraction in [", kMinThreshold, ", ",
                     kMaxThreshold, "] (0.1 names a rank more than 10% slower than the median "
                     "rank); got ", options.threshold));
  }
  if (options.window_steps < kMinWindowSteps || options.window_steps > kMaxWindowSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("slow_rank_window_steps: must be in [", kMinWindowSteps, ", ",
                     kMaxWindowSteps, "]; got ", options.window_steps));
  }
  return absl::OkStatus();
}

StragglerDetector::StragglerDetector(int world_size, StragglerOptions options)
    : world_size_(std::max(0, world_size)),
      options_(options),
      windows_(world_size_),
      named_(world_size_, false),
      latest_(world_size_) {}

std::vector<StragglerChange> StragglerDetector::AddStep(int step,
                                                        const std::vector<double>& compute_s) {
  std::vector<StragglerChange> changes;
  if (world_size_ < 2 || static_cast<int>(compute_s.size()) != world_size_) return changes;
  const size_t window = static_cast<size_t>(std::max(1, options_.window_steps));
  for (int rank = 0; rank < world_size_; ++rank) {
    std::deque<double>& times = windows_[rank];
    times.push_back(std::max(0.0, compute_s[rank]));
    if (times.size() > window) times.pop_front();
  }
  if (windows_[0].size() < window) return changes;  // every rank has as many steps

  std::vector<double> figures(world_size_);
  std::vector<double> scratch;
  for (int rank = 0; rank < world_size_; ++rank) {
    scratch.assign(windows_[rank].begin(), windows_[rank].end());
    figures[rank] = LowerMedian(scratch);
  }
  scratch = figures;
  const double reference = LowerMedian(scratch);
  if (reference <= 0) return changes;  // nothing measured to compare with

  for (int rank = 0; rank < world_size_; ++rank) {
    StragglerChange& now = latest_[rank];
    now.rank = rank;
    now.step = step;
    now.window_steps = static_cast<int>(window);
    now.rank_compute_s = figures[rank];
    now.median_compute_s = reference;
    now.slowdown = figures[rank] / reference - 1.0;
    bool slow = named_[rank];
    if (!slow && now.slowdown > options_.threshold) slow = true;
    if (slow && now.slowdown <= options_.threshold / 2) slow = false;
    now.slow = slow;
    if (slow == named_[rank]) continue;
    named_[rank] = slow;
    changes.push_back(now);
  }
  return changes;
}

std::vector<StragglerChange> StragglerDetector::Slow() const {
  std::vector<StragglerChange> slow;
  for (int rank = 0; rank < world_size_; ++rank) {
    if (named_[rank]) slow.push_back(latest_[rank]);
  }
  return slow;
}

}  // namespace tessera

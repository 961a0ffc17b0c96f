// Slow-rank job events and job-record entries (see slow_rank_event.h).
#include "server/slow_rank_event.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"

namespace tessera {

v1::SlowRank ToSlowRank(const StragglerChange& change, const std::string& worker_id,
                        const std::string& address) {
  v1::SlowRank rank;
  rank.set_rank(change.rank);
  rank.set_worker_id(worker_id);
  rank.set_address(address);
  rank.set_slowdown(change.slowdown);
  rank.set_rank_compute_s(change.rank_compute_s);
  rank.set_median_compute_s(change.median_compute_s);
  rank.set_window_steps(change.window_steps);
  rank.set_step(change.step);
  return rank;
}

v1::SlowRankChange MakeSlowRankChange(const StragglerChange& change, const std::string& worker_id,
                                      const std::string& address) {
  v1::SlowRankChange event;
  event.set_slow(change.slow);
  event.set_severity(change.slow ? v1::WARNING : v1::INFO);
  *event.mutable_rank() = ToSlowRank(change, worker_id, address);
  const std::string who = absl::StrFormat("rank %d (worker %s at %s)", change.rank, worker_id,
                                          address.empty() ? "an unknown address" : address);
  const int first = change.step - change.window_steps + 1;
  if (change.slow) {
    event.set_message(absl::StrFormat(
        "%s is %.0f%% slower than the median rank over the last %d steps (steps %d-%d): its "
        "median compute time per step is %.4f s against %.4f s",
        who, 100 * change.slowdown, change.window_steps, first, change.step,
        change.rank_compute_s, change.median_compute_s));
  } else {
    event.set_message(absl::StrFormat(
        "%s is no longer slow: %+.0f%% against the median rank over the last %d steps (steps "
        "%d-%d), median compute time per step %.4f s against %.4f s",
        who, 100 * change.slowdown, change.window_steps, first, change.step,
        change.rank_compute_s, change.median_compute_s));
  }
  return event;
}

void ApplySlowRankChange(const v1::SlowRankChange& change, v1::Job& job) {
  std::vector<v1::SlowRank> ranks(job.slow_ranks().begin(), job.slow_ranks().end());
  ranks.erase(std::remove_if(ranks.begin(), ranks.end(),
                             [&](const v1::SlowRank& r) { return r.rank() == change.rank().rank(); }),
              ranks.end());
  if (change.slow()) ranks.push_back(change.rank());
  std::sort(ranks.begin(), ranks.end(),
            [](const v1::SlowRank& a, const v1::SlowRank& b) { return a.rank() < b.rank(); });
  job.clear_slow_ranks();
  for (v1::SlowRank& r : ranks) *job.add_slow_ranks() = std::move(r);
}

}  // namespace tessera

// Mixture quotas and the smooth weighted round robin cycle (see
// data_mixture.h).
#include "common/data_mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::vector<int64_t>> MixtureQuotas(absl::Span<const double> weights,
                                                   const std::string& field_prefix) {
  if (weights.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field_prefix, ": must list at least one source"));
  }
  if (weights.size() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_prefix, ": too many sources (", weights.size(), ")"));
  }
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(field_prefix, "[", i,
                                                     "].weight: must be finite and > 0 (got ",
                                                     weights[i], ")"));
    }
    sum += weights[i];
  }
  if (!std::isfinite(sum)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_prefix, ": the sum of the weights must be finite"));
  }
  const double cycle = static_cast<double>(kMixtureCycleSlots);
  std::vector<int64_t> quotas(weights.size());
  std::vector<double> remainder(weights.size());
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = cycle * (weights[i] / sum);
    if (exact < 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_prefix, "[", i, "].weight: ", weights[i], " is ", weights[i] / sum,
          " of the sum of the weights; each source needs at least 1/", kMixtureCycleSlots,
          " of it"));
    }
    quotas[i] = static_cast<int64_t>(std::floor(exact));
    remainder[i] = exact - static_cast<double>(quotas[i]);
    given += quotas[i];
  }
  // Largest remainders first, the lower index on a tie.
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < kMixtureCycleSlots; k = (k + 1) % order.size()) {
    ++quotas[order[k]];
    ++given;
  }
  return quotas;
}

absl::StatusOr<MixtureSchedule> MixtureSchedule::Create(absl::Span<const double> weights,
                                                        const std::string& field_prefix) {
  absl::StatusOr<std::vector<int64_t>> quotas = MixtureQuotas(weights, field_prefix);
  if (!quotas.ok()) return quotas.status();
  MixtureSchedule schedule;
  schedule.quotas_ = std::move(*quotas);
  const size_t n = schedule.quotas_.size();
  schedule.source_of_.resize(kMixtureCycleSlots);
  schedule.ordinal_in_cycle_.resize(kMixtureCycleSlots);
  std::vector<int64_t> credit(n, 0), taken(n, 0);
  for (int64_t slot = 0; slot < kMixtureCycleSlots; ++slot) {
    size_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      credit[i] += schedule.quotas_[i];
      if (credit[i] > credit[best]) best = i;
    }
    credit[best] -= kMixtureCycleSlots;
    schedule.source_of_[slot] = static_cast<uint16_t>(best);
    schedule.ordinal_in_cycle_[slot] = static_cast<uint32_t>(taken[best]++);
  }
  return schedule;
}

MixtureSchedule::Draw MixtureSchedule::At(int64_t slot) const {
  const int64_t cycle = slot / kMixtureCycleSlots;
  const int64_t in_cycle = slot % kMixtureCycleSlots;
  Draw draw;
  draw.source = source_of_[in_cycle];
  draw.ordinal = cycle * quotas_[draw.source] + ordinal_in_cycle_[in_cycle];
  return draw;
}

}  // namespace tessera

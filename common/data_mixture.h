// How a weighted mixture of data sources (DataConfig.sources) turns into
// one global order of sequence slots. The coordinator checks the weights
// with the same rule the workers sample with, so this lives once, here.
//
// The slots repeat in cycles of kMixtureCycleSlots. Each source gets a
// whole number of slots per cycle (its quota: the weights' shares of the
// cycle, rounded by largest remainder so the quotas sum to the cycle), and
// inside a cycle the slots are dealt by smooth weighted round robin: at
// each slot every source's credit grows by its quota and the source with
// the most credit (the lowest index on a tie) takes the slot and pays the
// cycle length. Over any window of slots each source's count then differs
// from window x quota / cycle by less than one slot per source, not just in
// expectation. Slot k's source and how many sequences that source gave
// before it are a pure function of k (At), so any rank can find its own
// slots of any step without replaying the ones before.
#ifndef TESSERA_COMMON_DATA_MIXTURE_H_
#define TESSERA_COMMON_DATA_MIXTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera {

inline constexpr int64_t kMixtureCycleSlots = 65536;

// Slots per cycle for each weight. INVALID_ARGUMENT naming
// `field_prefix`[i].weight (e.g. "data.sources[2].weight: ...") for a
// weight that is not finite and > 0, or whose share of the sum is below
// 1 / kMixtureCycleSlots (it would get no slot); naming `field_prefix` when
// the list is empty or the sum is not finite.
absl::StatusOr<std::vector<int64_t>> MixtureQuotas(absl::Span<const double> weights,
                                                   const std::string& field_prefix);

class MixtureSchedule {
 public:
  // Validates like MixtureQuotas.
  static absl::StatusOr<MixtureSchedule> Create(absl::Span<const double> weights,
                                                const std::string& field_prefix);

  struct Draw {
    int source = 0;
    int64_t ordinal = 0;  // sequences this source gave in the slots before
  };
  Draw At(int64_t slot) const;  // slot >= 0

  const std::vector<int64_t>& quotas() const { return quotas_; }

 private:
  std::vector<int64_t> quotas_;             // [sources], summing to kMixtureCycleSlots
  std::vector<uint16_t> source_of_;         // [kMixtureCycleSlots]
  std::vector<uint32_t> ordinal_in_cycle_;  // [kMixtureCycleSlots]
};

}  // namespace tessera

#endif  // TESSERA_COMMON_DATA_MIXTURE_H_

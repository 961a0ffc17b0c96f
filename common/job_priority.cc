// JobSpec.priority's range and default (see job_priority.h).
#include "common/job_priority.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status CheckJobPriority(const v1::JobSpec& spec) {
  const int p = spec.priority();
  if (p == 0 || (p >= kMinJobPriority && p <= kMaxJobPriority)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("priority: must be in [", kMinJobPriority, ", ",
                                                 kMaxJobPriority, "], or 0 for the default ",
                                                 kDefaultJobPriority, " (got ", p, ")"));
}

int EffectiveJobPriority(const v1::JobSpec& spec) {
  return spec.priority() == 0 ? kDefaultJobPriority : spec.priority();
}

}  // namespace tessera

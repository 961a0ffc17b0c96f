// A job's scheduling priority (JobSpec.priority): the range, the default an
// unset field takes, and the check submit applies. Higher runs first. The
// range is small on purpose: a handful of levels is what operators can
// reason about (urgent, normal, batch), and a bounded range keeps a job
// from outbidding every other one by typing a bigger number. The scheduler
// (server/scheduler.h) orders its queue by it and lets a pending job
// preempt running jobs of strictly lower priority.
#ifndef TESSERA_COMMON_JOB_PRIORITY_H_
#define TESSERA_COMMON_JOB_PRIORITY_H_

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

inline constexpr int kMinJobPriority = 1;
inline constexpr int kMaxJobPriority = 9;
// What JobSpec.priority 0 (unset) means.
inline constexpr int kDefaultJobPriority = 5;

// OK for 0 or [kMinJobPriority, kMaxJobPriority]; otherwise
// INVALID_ARGUMENT "priority: must be in [1, 9], or 0 for the default 5
// (got 12)".
absl::Status CheckJobPriority(const v1::JobSpec& spec);

// The priority the job runs at: spec.priority(), or the default when unset.
int EffectiveJobPriority(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_COMMON_JOB_PRIORITY_H_

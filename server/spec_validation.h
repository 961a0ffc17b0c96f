// Checks a JobSpec before anything is scheduled, and fills in the documented
// defaults so that workers always receive a fully specified job.
//
// Every rejection is INVALID_ARGUMENT and names the field path and the
// reason, e.g. "model.d_model: must be divisible by model.n_heads (got 30
// and 4)". Validation stops at the first bad field. The upper bounds on
// sizes and counts are common/spec_limits.h, which workers check too. Fields
// this coordinator's job.proto does not have (kept by protobuf as unknown
// fields) are refused, naming the message path and field number.
#ifndef TESSERA_SERVER_SPEC_VALIDATION_H_
#define TESSERA_SERVER_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Largest world size a job may ask for.
inline constexpr int kMaxWorldSize = 1024;

// JobSpec.step_timeout_s when unset.
inline constexpr int kDefaultStepTimeoutSeconds = 600;

absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Replaces zero/unspecified fields with the defaults documented in
// job.proto. Call after ValidateJobSpec succeeded.
v1::JobSpec WithDefaults(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_SPEC_VALIDATION_H_

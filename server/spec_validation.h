// Checks a JobSpec before anything is scheduled. The documented defaults
// that fill in what a spec leaves out are common/spec_defaults.h (the CLI's
// export applies them too); this header brings them along for the
// coordinator, which validates and then applies them.
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
#include "common/spec_defaults.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Largest world size a job may ask for.
inline constexpr int kMaxWorldSize = 1024;

absl::Status ValidateJobSpec(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_SPEC_VALIDATION_H_

// The rules a JobSpec must keep that can be checked from the spec alone:
// every field's range, the model's shapes, the data, optimizer, FP8 and
// checkpoint settings, and no field this job.proto does not know. The
// coordinator applies them at submit time before the rules that read files
// (server/spec_validation.h: token files against the vocabulary, a
// starting model against the shapes); the CLI's export applies them to the
// job file it is given, so a bad file is refused naming its field.
//
// Every rejection is INVALID_ARGUMENT and names the field path and the
// reason, e.g. "model.d_model: must be divisible by model.n_heads (got 30
// and 4)". Checking stops at the first bad field. The upper bounds on sizes
// and counts are common/spec_limits.h, which workers check too. Fields this
// job.proto does not have (kept by protobuf as unknown fields) are refused,
// naming the message path and field number.
#ifndef TESSERA_COMMON_SPEC_RULES_H_
#define TESSERA_COMMON_SPEC_RULES_H_

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Largest world size a job may ask for.
inline constexpr int kMaxWorldSize = 1024;

absl::Status ValidateJobSpecFields(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_COMMON_SPEC_RULES_H_

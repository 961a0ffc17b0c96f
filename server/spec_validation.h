// Checks a JobSpec before anything is scheduled: the rules of the spec
// alone (common/spec_rules.h, which the CLI's export applies too), then the
// rules that read files: each token file's vocabulary fits
// model.vocab_size, and a model.init_from directory matches the model's
// shapes. The documented defaults that fill in what a spec leaves out are
// common/spec_defaults.h (the CLI's export applies them too); this header
// brings them along for the coordinator, which validates and then applies
// them. Every rejection is INVALID_ARGUMENT naming the field and the reason.
#ifndef TESSERA_SERVER_SPEC_VALIDATION_H_
#define TESSERA_SERVER_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "common/spec_defaults.h"
#include "common/spec_rules.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

absl::Status ValidateJobSpec(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_SPEC_VALIDATION_H_

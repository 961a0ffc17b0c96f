// The defaults a JobSpec's unset fields take, as job.proto documents them.
// The coordinator applies them to every job it accepts, so workers always
// receive a fully specified spec; the spec hash a checkpoint records
// (formats/spec_hash.h) is of that spec, so `tessera export` applies the
// same defaults to the job file it is given before comparing hashes.
#ifndef TESSERA_COMMON_SPEC_DEFAULTS_H_
#define TESSERA_COMMON_SPEC_DEFAULTS_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// JobSpec.step_timeout_s when unset.
inline constexpr int kDefaultStepTimeoutSeconds = 600;

// Replaces zero/unspecified fields with the defaults documented in
// job.proto. The coordinator calls it after ValidateJobSpec succeeded.
v1::JobSpec WithDefaults(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_COMMON_SPEC_DEFAULTS_H_

// Submit-time memory admission: a job whose ranks cannot fit in any
// registered worker of its device kind is refused with RESOURCE_EXHAUSTED
// and the estimate, before it is queued and before any worker allocates a
// byte, instead of failing later in SetupJob (or, worse, waiting forever).
//
// The estimate is common/memory_estimate.h, the formula the workers also
// apply in SetupJob. Workers report their memory at registration
// (DeviceInfo.memory_bytes: device memory on GPUs, host memory on CPU).
// Only what is known is judged: with no healthy worker of the kind
// registered yet, or one that reports no memory size, the job is admitted
// (workers may still join; SetupJob checks again against free memory).
#ifndef TESSERA_SERVER_MEMORY_ADMISSION_H_
#define TESSERA_SERVER_MEMORY_ADMISSION_H_

#include <vector>

#include "absl/status/status.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

// `spec` carries the coordinator's defaults (spec_validation.h). OK, or
// RESOURCE_EXHAUSTED naming the bytes one rank needs (with the breakdown)
// and the most memory any healthy registered worker of the kind has.
absl::Status CheckJobFitsRegisteredWorkers(const v1::JobSpec& spec,
                                           const std::vector<v1::WorkerRecord>& workers);

}  // namespace tessera

#endif  // TESSERA_SERVER_MEMORY_ADMISSION_H_

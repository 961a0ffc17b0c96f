// Submit-time check of model.init_from: the Hugging Face directory a job
// starts from must fit its model (config.json's fields, every tensor's
// name and shape; formats/hf_import.h), so a mismatch is refused
// when the job is submitted, naming the tensor, instead of failing on every
// worker at setup.
//
// Only config.json and the safetensors headers are read. A directory or
// file the coordinator cannot open (NOT_FOUND, PERMISSION_DENIED) is left
// to the workers, which open it again at setup and fail the job with the
// reason: the coordinator may not see the same filesystem as the workers.
#ifndef TESSERA_SERVER_INIT_FROM_CHECK_H_
#define TESSERA_SERVER_INIT_FROM_CHECK_H_

#include "absl/status/status.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// `spec` with the coordinator's defaults applied (norm_eps, rope_theta and
// n_kv_heads are compared with config.json).
absl::Status CheckInitFromFitsModel(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_INIT_FROM_CHECK_H_

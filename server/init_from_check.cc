// model.init_from against the job's model (see init_from_check.h).
#include "server/init_from_check.h"

#include "formats/hf_import.h"

namespace tessera {

absl::Status CheckInitFromFitsModel(const v1::JobSpec& spec) {
  if (spec.model().init_from().empty()) return absl::OkStatus();
  absl::Status s = HfLlamaSource::Open(spec.model(), spec.model().init_from()).status();
  if (s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kPermissionDenied) {
    return absl::OkStatus();
  }
  return s;
}

}  // namespace tessera

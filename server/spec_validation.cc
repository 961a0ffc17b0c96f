// JobSpec validation at submit time (see spec_validation.h): the rules of
// the spec alone, then the two that read files.
#include "server/spec_validation.h"

#include "common/spec_rules.h"
#include "common/status_macros.h"
#include "server/init_from_check.h"
#include "server/token_file_check.h"

namespace tessera {

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobSpecFields(spec));
  // Last: the only rules that read files (their headers).
  RETURN_IF_ERROR(CheckTokenFilesFitVocab(spec));
  return CheckInitFromFitsModel(WithDefaults(spec));
}

}  // namespace tessera

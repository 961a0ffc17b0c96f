// Job files: YAML or JSON documents whose field names are exactly those of
// JobSpec in proto/tessera/v1/job.proto, so there is one schema. YAML is
// converted to JSON and both go through protobuf's JSON parser, which
// rejects unknown fields and bad enum names.
#ifndef TESSERA_CLIENT_JOB_FILE_H_
#define TESSERA_CLIENT_JOB_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Parses text as YAML (JSON is a subset of the YAML we accept, but JSON text
// goes straight to the JSON parser). `source` names the text in errors.
absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source);
// Reads and parses a file; NOT_FOUND if it cannot be read.
absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path);
// JobSpec as pretty JSON with the proto field names.
std::string JobSpecToJson(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_CLIENT_JOB_FILE_H_

// Job files: YAML or JSON documents whose field names are exactly those of
// JobSpec in proto/tessera/v1/job.proto, so there is one schema. JSON text
// goes to protobuf's JSON parser; YAML is first converted to JSON, so field
// names, enum names and nesting are the same in both. Unknown fields, bad
// enum names and camelCase spellings are rejected: a typo must never be
// silently ignored in a training job.
#ifndef TESSERA_CLIENT_JOB_FILE_H_
#define TESSERA_CLIENT_JOB_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

enum class JobFileFormat {
  kAuto,  // JSON if the text starts with '{', YAML otherwise
  kYaml,
  kJson,
};

// Parses a job file's text. `source` names the text in errors, which are
// INVALID_ARGUMENT of the form "job.yaml: line 4: model.d_modle: unknown field".
absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source,
                                         JobFileFormat format = JobFileFormat::kAuto);

// Reads and parses a file; the format follows the extension (.yaml, .yml,
// .json), else the content. NOT_FOUND if the file cannot be read.
absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path);

// A JobSpec as a job file (proto field names, enum names), for --dry-run and
// docs. Both outputs parse back to an equal JobSpec.
std::string JobSpecToJson(const v1::JobSpec& spec);
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_CLIENT_JOB_FILE_H_

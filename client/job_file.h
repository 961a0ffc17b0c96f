// Job files: YAML or JSON documents whose field names are exactly those of
// JobSpec in proto/tessera/v1/job.proto, so there is one schema. JSON text
// goes to protobuf's JSON parser; YAML is first converted to JSON, so field
// names, enum names and nesting are the same in both. Unknown fields (named
// with their path and, when one is close, the field meant), duplicate
// fields, bad enum names and camelCase spellings are rejected: a typo must
// never be silently ignored in a training job.
//
// A job file is a few dozen lines, so hostile or broken input is refused
// before any parser recurses over it or any value is copied around: at most
// kMaxJobFileBytes, nested at most kMaxJobFileDepth levels, no single value
// longer than kMaxJobFileValueBytes, and at most kMaxJobFileNodes values
// (YAML aliases counted at each use, so a few lines cannot expand into an
// exponentially large document).
#ifndef TESSERA_CLIENT_JOB_FILE_H_
#define TESSERA_CLIENT_JOB_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

inline constexpr int64_t kMaxJobFileBytes = 1 << 20;
inline constexpr int kMaxJobFileDepth = 32;
inline constexpr int64_t kMaxJobFileValueBytes = 64 << 10;
inline constexpr int64_t kMaxJobFileNodes = 10000;

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
// .json), else the content. NOT_FOUND if the file cannot be read;
// INVALID_ARGUMENT naming the file if it is larger than kMaxJobFileBytes
// (checked before it is read) or does not parse.
absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path);

// A JobSpec as a job file (proto field names, enum names), for --dry-run and
// docs. Both outputs parse back to an equal JobSpec.
std::string JobSpecToJson(const v1::JobSpec& spec);
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_CLIENT_JOB_FILE_H_

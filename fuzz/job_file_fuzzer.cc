// Fuzzes the job-file parser (client/job_file.h) with arbitrary text as YAML,
// as JSON and as auto-detected. Any input must come back as a JobSpec or an
// error, never a crash, hang or unbounded allocation; and a spec that parses
// must survive the documented round trip: written as JSON and as YAML, each
// parses back to an equal JobSpec.
#include <cstddef>
#include <cstdint>
#include <string>

#include "client/job_file.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

void CheckRoundTrip(const tessera::v1::JobSpec& spec) {
  using google::protobuf::util::MessageDifferencer;
  absl::StatusOr<tessera::v1::JobSpec> from_json =
      tessera::ParseJobSpec(tessera::JobSpecToJson(spec), "round-trip.json",
                            tessera::JobFileFormat::kJson);
  FUZZ_CHECK(from_json.ok(), "a parsed spec written as JSON does not parse back");
  FUZZ_CHECK(MessageDifferencer::Equals(spec, *from_json), "JSON round trip changed the spec");
  absl::StatusOr<tessera::v1::JobSpec> from_yaml =
      tessera::ParseJobSpec(tessera::JobSpecToYaml(spec), "round-trip.yaml",
                            tessera::JobFileFormat::kYaml);
  FUZZ_CHECK(from_yaml.ok(), "a parsed spec written as YAML does not parse back");
  FUZZ_CHECK(MessageDifferencer::Equals(spec, *from_yaml), "YAML round trip changed the spec");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (tessera::JobFileFormat format :
       {tessera::JobFileFormat::kYaml, tessera::JobFileFormat::kJson,
        tessera::JobFileFormat::kAuto}) {
    absl::StatusOr<tessera::v1::JobSpec> spec = tessera::ParseJobSpec(text, "fuzz", format);
    if (spec.ok()) {
      CheckRoundTrip(*spec);
    } else {
      FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
                 "a job file was refused with a code other than INVALID_ARGUMENT");
    }
  }
  return 0;
}

// See log_line_format.h.
#include "common/log_line_format.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tessera {
namespace {

const char* SeverityName(v1::LogSeverity s) {
  switch (s) {
    case v1::WARNING: return "WARNING";
    case v1::ERROR: return "ERROR";
    default: return "INFO";
  }
}

}  // namespace

std::string FormatLogLine(const v1::LogLine& line) {
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(line.time_unix_ms()),
                       absl::UTCTimeZone()),
      " ", SeverityName(line.severity()), " job=", line.job_id(), " rank=", line.rank(),
      " step=", line.step() >= 0 ? absl::StrCat(line.step()) : std::string("-"), " ",
      line.message());
}

}  // namespace tessera

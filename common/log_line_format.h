// The one text format of a job's log lines, used by the worker when it
// prints them and by `tessera logs` when it shows them:
//   2026-11-23T23:51:07.123Z INFO job=job-3 rank=1 step=42 message
// with "step=-" for a line about no particular step; UTC, milliseconds.
#ifndef TESSERA_COMMON_LOG_LINE_FORMAT_H_
#define TESSERA_COMMON_LOG_LINE_FORMAT_H_

#include <string>

#include "proto/tessera/v1/worker.pb.h"

namespace tessera {

std::string FormatLogLine(const v1::LogLine& line);

}  // namespace tessera

#endif  // TESSERA_COMMON_LOG_LINE_FORMAT_H_

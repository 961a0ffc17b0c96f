// Upper bounds on the strings and lists of coordinator requests other than
// the JobSpec (whose bounds are common/spec_limits.h), and on the text the
// coordinator stores from workers. Every record the coordinator keeps and
// every response it sends is therefore bounded, so no request can make a
// later call fail (a job named with 10 MB once made every ListJobs response
// exceed gRPC's 4 MB message limit). A request beyond a bound is
// INVALID_ARGUMENT naming the field and the bound, and never echoes the value.
#ifndef TESSERA_SERVER_REQUEST_LIMITS_H_
#define TESSERA_SERVER_REQUEST_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

inline constexpr int64_t kMaxIdBytes = 128;          // job_id, worker_id
inline constexpr int64_t kMaxReasonBytes = 1024;     // cancel reason, health_reason
inline constexpr int64_t kMaxAddressBytes = 256;     // worker address, device name and host
inline constexpr int64_t kMaxPageTokenBytes = 1024;  // ListJobs page_token
inline constexpr int64_t kMaxPhaseBytes = 64;        // WorkerActivity.phase
inline constexpr int64_t kMaxRendezvousKeyBytes = 256;
inline constexpr int64_t kMaxRendezvousValueBytes = int64_t{1} << 20;
inline constexpr int kMaxRendezvousKeysPerGet = 4096;

// Job reasons and worker error messages are stored (and sent) cut to this.
inline constexpr size_t kMaxStoredMessageBytes = 4096;

// `text` cut to at most `max_bytes` bytes on a UTF-8 character boundary
// (protobuf refuses to parse a string field holding half a character),
// ending in " [truncated]" when it was cut.
std::string TruncateUtf8(absl::string_view text, size_t max_bytes);

}  // namespace tessera

#endif  // TESSERA_SERVER_REQUEST_LIMITS_H_

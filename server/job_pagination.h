// Pages of ListJobs, following Google AIP-158. Jobs are listed newest first
// (creation time, then job number). A page token is opaque to clients: it
// holds the position of the last job of the previous page and a fingerprint
// of the request's filter, so a token is refused (INVALID_ARGUMENT) with a
// different filter. Listing resumes strictly after that position, so jobs
// submitted or deleted between calls neither repeat nor shift a page.
#ifndef TESSERA_SERVER_JOB_PAGINATION_H_
#define TESSERA_SERVER_JOB_PAGINATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

inline constexpr int kDefaultJobsPageSize = 100;
inline constexpr int kMaxJobsPageSize = 1000;
// A page also ends before its jobs reach this many bytes (at least one job
// per page), half of gRPC's default 4 MiB message limit.
inline constexpr int64_t kMaxJobsPageBytes = int64_t{2} << 20;

// A job's place in the listing order.
struct JobListPosition {
  int64_t create_time_unix_ms = 0;
  std::string job_id;
};
JobListPosition PositionOf(const v1::Job& job);
// True if `a` is listed before `b` (newer first).
bool ListedBefore(const JobListPosition& a, const JobListPosition& b);

// 0 means kDefaultJobsPageSize; above kMaxJobsPageSize means the maximum;
// negative is INVALID_ARGUMENT naming page_size.
absl::StatusOr<int> ResolvePageSize(int requested);

// The same for any order of `states`.
uint64_t FilterFingerprint(const std::vector<v1::JobState>& states);
// The same with an owner filter: equal to the above for an empty owner.
uint64_t FilterFingerprint(const std::vector<v1::JobState>& states, const std::string& owner);

std::string EncodePageToken(const JobListPosition& last, uint64_t filter_fingerprint);
// nullopt for an empty token (the first page). INVALID_ARGUMENT naming
// page_token for a malformed token or one made for another filter.
absl::StatusOr<std::optional<JobListPosition>> DecodePageToken(const std::string& token,
                                                               uint64_t filter_fingerprint);

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_PAGINATION_H_

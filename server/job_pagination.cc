// ListJobs page sizes and tokens (see job_pagination.h).
//
// Token: web-safe base64 of "v1:<fingerprint>:<create_time_unix_ms>:<job_id>".
#include "server/job_pagination.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/request_limits.h"

namespace tessera {
namespace {

absl::Status BadToken(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("page_token: ", why));
}

}  // namespace

JobListPosition PositionOf(const v1::Job& job) { return {job.create_time_unix_ms(), job.id()}; }

bool ListedBefore(const JobListPosition& a, const JobListPosition& b) {
  if (a.create_time_unix_ms != b.create_time_unix_ms) {
    return a.create_time_unix_ms > b.create_time_unix_ms;
  }
  // "job-10" is newer than "job-9": longer ids first, then larger ones.
  if (a.job_id.size() != b.job_id.size()) return a.job_id.size() > b.job_id.size();
  return a.job_id > b.job_id;
}

absl::StatusOr<int> ResolvePageSize(int requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: must be >= 0 (0 means ",
                                                   kDefaultJobsPageSize, "), got ", requested));
  }
  if (requested == 0) return kDefaultJobsPageSize;
  return std::min(requested, kMaxJobsPageSize);
}

uint64_t FilterFingerprint(const std::vector<v1::JobState>& states) {
  uint64_t mask = 0;
  for (v1::JobState s : states) mask |= uint64_t{1} << (static_cast<int>(s) & 63);
  return mask;
}

uint64_t FilterFingerprint(const std::vector<v1::JobState>& states, const std::string& owner) {
  if (owner.empty()) return FilterFingerprint(states);
  // FNV-1a of the owner in the bits above the state mask's (states < 16).
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : owner) hash = (hash ^ c) * 1099511628211ull;
  return FilterFingerprint(states) ^ (hash << 16) ^ (uint64_t{1} << 15);
}

std::string EncodePageToken(const JobListPosition& last, uint64_t filter_fingerprint) {
  return absl::WebSafeBase64Escape(
      absl::StrCat("v1:", filter_fingerprint, ":", last.create_time_unix_ms, ":", last.job_id));
}

absl::StatusOr<std::optional<JobListPosition>> DecodePageToken(const std::string& token,
                                                               uint64_t filter_fingerprint) {
  if (token.empty()) return std::optional<JobListPosition>();
  if (static_cast<int64_t>(token.size()) > kMaxPageTokenBytes) {
    return BadToken(
        absl::StrCat("must be at most ", kMaxPageTokenBytes, " bytes (got ", token.size(), ")"));
  }
  std::string text;
  if (!absl::WebSafeBase64Unescape(token, &text)) {
    return BadToken("not a token returned by ListJobs");
  }
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 3));
  uint64_t fingerprint = 0;
  JobListPosition position;
  if (parts.size() != 4 || parts[0] != "v1" || !absl::SimpleAtoi(parts[1], &fingerprint) ||
      !absl::SimpleAtoi(parts[2], &position.create_time_unix_ms) || parts[3].empty()) {
    return BadToken("not a token returned by ListJobs");
  }
  if (fingerprint != filter_fingerprint) {
    return BadToken(
        "was returned for a different states filter or owner; "
        "repeat the request that returned it with only page_token changed");
  }
  position.job_id = parts[3];
  return std::optional<JobListPosition>(std::move(position));
}

}  // namespace tessera

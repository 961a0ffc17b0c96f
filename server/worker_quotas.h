// The coordinator's quota file: how many workers each user's jobs may hold
// at once. Kept apart from the scheduler (quota_ledger.h applies the
// limits) so the file's rules are stated and tested once, without a server.
//
// One quota a line, `USER MAX_WORKERS`:
//   - USER is a user name as the user token file spells it
//     (common/user_tokens.h), or `*` for every user the file does not name;
//   - MAX_WORKERS is a whole number from 0 to kMaxQuotaWorkers, or
//     `unlimited` (a user exempt from a `*` line).
// `#` starts a comment (a whole line or the rest of one); blank lines are
// skipped; fields are separated by spaces or tabs. A user, and `*`, may
// appear once. Without a `*` line, users the file does not name have no
// limit. A file with no quota lines sets no limits.
//
// Errors are INVALID_ARGUMENT "PATH: line N: why" (or "PATH: why" for the
// file as a whole), so an operator finds the line at once.
#ifndef TESSERA_SERVER_WORKER_QUOTAS_H_
#define TESSERA_SERVER_WORKER_QUOTAS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tessera {

// A quota above any cluster; a larger number is taken for a typing error.
inline constexpr int kMaxQuotaWorkers = 1000000;
// A quota file larger than this is refused (it is a short list of users).
inline constexpr int64_t kMaxQuotaFileBytes = 1 << 20;

struct WorkerQuotas {
  // The limit of each named user; nullopt: `unlimited`.
  std::map<std::string, std::optional<int>> per_user;
  // The `*` line's limit for users not named; nullopt: no such line.
  std::optional<int> others;

  // The most workers `user`'s jobs may hold at once; nullopt: no limit.
  // A job without an owner (a coordinator that checks no tokens) has none.
  std::optional<int> LimitFor(const std::string& user) const;
  // True if `user` has no line of their own and takes the `*` limit.
  bool FromDefault(const std::string& user) const;
  // One line for the log: "alice 2, bob unlimited; others 4".
  std::string Summary() const;
};

// The quotas in `text`, the contents of the file at `path` (which only names
// it in errors).
absl::StatusOr<WorkerQuotas> ParseWorkerQuotas(const std::string& path, const std::string& text);

// ParseWorkerQuotas of the regular file at `path` (at most
// kMaxQuotaFileBytes). A file that cannot be read is an error naming it.
absl::StatusOr<WorkerQuotas> ReadWorkerQuotaFile(const std::string& path);

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_QUOTAS_H_

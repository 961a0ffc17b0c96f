// The coordinator's user token file: who each user token belongs to and
// whether that user is an admin. Jobs record the user who submitted them,
// and only that user or an admin may change them (server/job_access.h), so
// every token must name its user.
//
// One token a line: `NAME ROLE TOKEN`, where NAME is the user (1 to 64 of
// a-z, 0-9, '.', '_', '-', starting with a letter or digit), ROLE is `user`
// or `admin`, and TOKEN follows the rules of secret_file.h. A user may have
// several tokens (to rotate one), all with the same role. Blank lines and
// lines starting with '#' are skipped. A line holding only a token (the
// file's form before users were named) is an admin named by the token's
// digest (LegacyTokenUser), which keeps what such a token could do before.
// Errors are INVALID_ARGUMENT naming the flag and the line.
#ifndef TESSERA_COMMON_USER_TOKENS_H_
#define TESSERA_COMMON_USER_TOKENS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/access_policy.h"

namespace tessera {

// Most bytes in a user name.
inline constexpr size_t kMaxUserNameBytes = 64;

// Every token in `text` (at least one); `flag` starts each error.
absl::StatusOr<std::vector<UserToken>> ParseUserTokens(const std::string& flag,
                                                       const std::string& text);

// ParseUserTokens of the file at `path` (read as secret_file.h reads).
absl::StatusOr<std::vector<UserToken>> ReadUserTokenFile(const std::string& flag,
                                                         const std::string& path);

// OK if `name` is a valid user name; INVALID_ARGUMENT saying why otherwise.
absl::Status CheckUserName(const std::string& name);

// How many tokens are listed without a name (see above).
int CountUnnamedTokens(const std::vector<UserToken>& tokens);

}  // namespace tessera

#endif  // TESSERA_COMMON_USER_TOKENS_H_

// Reading credentials from files. Tokens and TLS material live in files
// (or, for the CLI, an environment variable) so they never appear on a
// command line, where `ps` would show them to every user of the machine.
// A token file holds one token per line; blank lines and lines starting
// with '#' are skipped, surrounding whitespace is trimmed. Errors name the
// flag the path came from.
#ifndef TESSERA_COMMON_SECRET_FILE_H_
#define TESSERA_COMMON_SECRET_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Tokens shorter than this are refused: they are guessable.
inline constexpr size_t kMinTokenBytes = 16;
// No credential file is larger than this.
inline constexpr size_t kMaxSecretFileBytes = 1 << 20;

// The whole file. INVALID_ARGUMENT naming `flag` if it cannot be read, is
// empty or is larger than kMaxSecretFileBytes.
absl::StatusOr<std::string> ReadSecretFile(const std::string& flag, const std::string& path);

// Every token in the file (at least one).
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& flag,
                                                       const std::string& path);

// Exactly one token, from `text` (the contents of a file or variable).
absl::StatusOr<std::string> ParseSingleToken(const std::string& source, const std::string& text);

}  // namespace tessera

#endif  // TESSERA_COMMON_SECRET_FILE_H_

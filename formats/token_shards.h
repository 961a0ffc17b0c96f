// Which token files a data source path names (DataSource.path): a token
// file, or a directory of token-file shards. The coordinator lists them to
// check every file's tokenizer at submit, and each worker lists them to read
// the source, so both must agree on the rule, which lives here:
//
// - a path that names a regular file (or a link to one) is that one file;
// - a directory stands for the regular files in it (links to regular files
//   included), in byte-wise sorted name order, skipping names that start
//   with "." and unfinished writes (names containing ".tmp.", as
//   WriteTokenFile leaves them while it writes). Subdirectories and other
//   entries are ignored, not descended into. Every file listed must be a
//   token file: its reader refuses any other, naming it;
// - a directory with no such file is an error naming the path.
#ifndef TESSERA_FORMATS_TOKEN_SHARDS_H_
#define TESSERA_FORMATS_TOKEN_SHARDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Most shards one directory may hold.
inline constexpr int64_t kMaxTokenShardsPerSource = 65536;

// The token files of `path`, each as "path/name" for a directory.
// NOT_FOUND when nothing is at `path`; INVALID_ARGUMENT naming the path for
// an empty directory, one with more than kMaxTokenShardsPerSource shards, or
// a path that is neither a regular file nor a directory; PERMISSION_DENIED
// or INTERNAL when it cannot be read.
absl::StatusOr<std::vector<std::string>> ListTokenShards(const std::string& path);

}  // namespace tessera

#endif  // TESSERA_FORMATS_TOKEN_SHARDS_H_

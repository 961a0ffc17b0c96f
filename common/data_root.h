// Where a worker may write. An operator gives each worker a data root
// (--data_root); every path a job asks it to write (checkpoint.dir) must
// resolve inside it. Resolution follows symlinks in the part of the path
// that exists already, so a link pointing out of the root is caught, and
// refuses ".." in the part that does not exist yet. The coordinator checks
// the same rule at submit time against its own root (it writes the commit
// marker into checkpoint.dir), and each worker checks again before it
// touches the filesystem.
#ifndef TESSERA_COMMON_DATA_ROOT_H_
#define TESSERA_COMMON_DATA_ROOT_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera {

// The canonical absolute form of an existing directory `root` (the flag's
// value): INVALID_ARGUMENT naming `flag` if it does not exist or is not a
// directory.
absl::StatusOr<std::string> CanonicalDataRoot(const std::string& flag, const std::string& root);

// `path` (absolute, or relative to the working directory) made absolute
// with symlinks resolved as far as it exists.
absl::StatusOr<std::string> ResolvePath(const std::string& field, const std::string& path);

// OK if `path` resolves to `canonical_root` or below it; otherwise
// INVALID_ARGUMENT naming `field`, the path and the root. An empty root
// allows every path (no root configured).
absl::Status CheckUnderDataRoot(const std::string& canonical_root, const std::string& field,
                                const std::string& path);

}  // namespace tessera

#endif  // TESSERA_COMMON_DATA_ROOT_H_

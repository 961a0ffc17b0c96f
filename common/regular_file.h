// Reading a whole file, or opening one, whose path may come from outside (a
// job spec's token file or model directory, a checkpoint's manifests):
// the path is opened non-blocking and must name a regular file. A FIFO at
// that path would otherwise stall the reading thread (its open waits for a
// writer), and a device could stream without end; both are refused at once.
#ifndef TESSERA_COMMON_REGULAR_FILE_H_
#define TESSERA_COMMON_REGULAR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tessera {

// Whether a symbolic link at the path itself is followed. Tessera's own
// files (checkpoints) refuse them; files users point at (token files, model
// directories, whose caches are often links) follow them.
enum class Symlinks { kFollow, kRefuse };

// An open read-only descriptor (close-on-exec, blocking mode restored) for
// the regular file at `path`; the caller closes it. NOT_FOUND when nothing
// is there, PERMISSION_DENIED when it may not be read, INVALID_ARGUMENT
// "PATH: is a symbolic link" (kRefuse) or "PATH: is not a regular file",
// INTERNAL for other I/O errors.
absl::StatusOr<int> OpenRegularFile(const std::string& path, Symlinks symlinks);

// The whole regular file at `path`; OUT_OF_RANGE when it is larger than
// `max_bytes`. Other errors as OpenRegularFile's.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            Symlinks symlinks);

}  // namespace tessera

#endif  // TESSERA_COMMON_REGULAR_FILE_H_

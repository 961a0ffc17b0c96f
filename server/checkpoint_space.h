// Room on disk for the next checkpoint. Before a checkpoint the job runner
// compares the free space under checkpoint.dir with the checkpoint's size
// (common/checkpoint_size.h). When it is short, the committed steps that
// the new commit would prune anyway under checkpoint.keep_last go first,
// oldest first, until the checkpoint fits. If it still does not fit, the
// runner skips that checkpoint with a warning and trains on; only the
// final checkpoint fails the job, naming the bytes needed and available.
// A full disk found during the write itself is treated the same way
// (job_runner.h).
#ifndef TESSERA_SERVER_CHECKPOINT_SPACE_H_
#define TESSERA_SERVER_CHECKPOINT_SPACE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Bytes an unprivileged writer may still use on the filesystem holding
// `path` (statvfs f_bavail; a path not made yet is measured at its nearest
// existing parent).
absl::StatusOr<int64_t> FreeBytesUnder(const std::string& path);
using FreeBytesProbe = std::function<absl::StatusOr<int64_t>(const std::string& path)>;

struct CheckpointRoom {
  int64_t needed = 0;
  int64_t available = 0;           // after any pruning
  std::vector<int64_t> pruned;     // committed steps removed to make room
  bool fits() const { return available >= needed; }
};

// Checks that `needed` bytes fit under `root` for the checkpoint of `step`,
// pruning committed steps below it down to keep_last - 1 (oldest first,
// only while short; keep_last 0 keeps every step, so nothing is pruned).
absl::StatusOr<CheckpointRoom> MakeRoomForCheckpoint(const std::string& root, int step,
                                                     int64_t needed, int keep_last,
                                                     const FreeBytesProbe& free_bytes);

}  // namespace tessera

#endif  // TESSERA_SERVER_CHECKPOINT_SPACE_H_

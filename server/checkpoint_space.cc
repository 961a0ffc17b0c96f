// Free space and pruning before a checkpoint (see checkpoint_space.h).
#include "server/checkpoint_space.h"

#include <errno.h>
#include <sys/statvfs.h>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/durable_file.h"
#include "common/status_macros.h"

namespace tessera {

absl::StatusOr<int64_t> FreeBytesUnder(const std::string& path) {
  std::string p = path.empty() ? "." : path;
  while (true) {
    struct statvfs st;
    if (::statvfs(p.c_str(), &st) == 0) {
      return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
    }
    if (errno != ENOENT) return FileErrno(errno, "measuring the free space of", p);
    const size_t slash = p.find_last_of('/');
    if (slash == std::string::npos) {
      p = ".";
    } else if (slash == 0) {
      p = "/";
    } else {
      p = p.substr(0, slash);
    }
  }
}

absl::StatusOr<CheckpointRoom> MakeRoomForCheckpoint(const std::string& root, int step,
                                                     int64_t needed, int keep_last,
                                                     const FreeBytesProbe& free_bytes) {
  CheckpointRoom room;
  room.needed = needed;
  ASSIGN_OR_RETURN(room.available, free_bytes(root));
  if (room.fits() || keep_last <= 0) return room;
  ASSIGN_OR_RETURN(const std::vector<int64_t> committed, ListCommittedSteps(root));
  std::vector<int64_t> older;
  for (int64_t s : committed) {
    if (s < step) older.push_back(s);
  }
  // Once `step` is committed, only the newest keep_last - 1 of these stay.
  const size_t keep = static_cast<size_t>(keep_last - 1);
  for (size_t i = 0; i + keep < older.size() && !room.fits(); ++i) {
    RETURN_IF_ERROR(RemoveStepDir(root, older[i]));
    room.pruned.push_back(older[i]);
    ASSIGN_OR_RETURN(room.available, free_bytes(root));
  }
  return room;
}

}  // namespace tessera

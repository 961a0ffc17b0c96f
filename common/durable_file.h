// Crash-safe file writes for checkpoints. A file is written under a temporary
// name in its final directory, fsynced, renamed over its final name, and the
// directory is fsynced, so after Commit() returns OK the file survives a
// power loss under its final name, and at any earlier moment a reader sees
// either no file (or the previous one) or the complete new one, never a
// partial one. A writer destroyed before Commit() removes its temporary file.
//
// Checkpoint files are read back with ReadRegularFile (regular_file.h) and
// Symlinks::kRefuse, so a name inside a checkpoint directory cannot be
// redirected somewhere else on the filesystem.
#ifndef TESSERA_COMMON_DURABLE_FILE_H_
#define TESSERA_COMMON_DURABLE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sha256.h"

namespace tessera {

class DurableFileWriter {
 public:
  // Opens dir/<name>.tmp-<pid> for writing. `dir` must exist.
  static absl::StatusOr<std::unique_ptr<DurableFileWriter>> Create(const std::string& dir,
                                                                  const std::string& name);
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  absl::Status Append(const void* data, size_t size);
  absl::Status Append(absl::string_view data) { return Append(data.data(), data.size()); }
  // Flushes, fsyncs, renames into place and fsyncs the directory.
  absl::Status Commit();

  // Bytes appended so far, and (after Commit) their SHA-256 in hex.
  int64_t size() const { return size_; }
  const std::string& sha256() const { return digest_; }
  const std::string& path() const { return path_; }

 private:
  DurableFileWriter(std::string dir, std::string path, std::string temp_path, int fd);
  absl::Status Flush();

  std::string dir_, path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  std::string buffer_;
  int64_t size_ = 0;
  Sha256 hasher_;
  std::string digest_;
};

// Writes `data` to dir/name durably (see above).
absl::Status WriteFileDurably(const std::string& dir, const std::string& name,
                              absl::string_view data);

// fsyncs a directory, making renames and unlinks inside it durable.
absl::Status FsyncDirectory(const std::string& dir);

// The names in `dir` other than "." and "..", sorted. NOT_FOUND when dir
// does not exist.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);

// Maps an errno from a filesystem call on `what` to a Status: ENOSPC and
// EDQUOT are RESOURCE_EXHAUSTED, ENOENT NOT_FOUND, EACCES, EPERM and EROFS
// PERMISSION_DENIED, the rest (EIO and the like) INTERNAL.
absl::Status FileErrno(int err, const std::string& action, const std::string& what);

}  // namespace tessera

#endif  // TESSERA_COMMON_DURABLE_FILE_H_

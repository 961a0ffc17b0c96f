// Temp-file + fsync + rename + directory fsync writes, and bounded,
// symlink-refusing reads (see durable_file.h).
#include "common/durable_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& what) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileErrno(errno, "writing", what);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FileErrno(int err, const std::string& action, const std::string& what) {
  const std::string message = absl::StrCat(action, " ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

DurableFileWriter::DurableFileWriter(std::string dir, std::string path, std::string temp_path,
                                     int fd)
    : dir_(std::move(dir)), path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {
  buffer_.reserve(kBufferBytes);
}

absl::StatusOr<std::unique_ptr<DurableFileWriter>> DurableFileWriter::Create(
    const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string temp = absl::StrCat(path, ".tmp-", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return FileErrno(errno, "creating", temp);
  return std::unique_ptr<DurableFileWriter>(new DurableFileWriter(dir, path, temp, fd));
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

absl::Status DurableFileWriter::Flush() {
  absl::Status s = WriteAll(fd_, buffer_.data(), buffer_.size(), temp_path_);
  buffer_.clear();
  return s;
}

absl::Status DurableFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  hasher_.Update(data, size);
  size_ += static_cast<int64_t>(size);
  if (buffer_.size() + size > kBufferBytes) {
    if (absl::Status s = Flush(); !s.ok()) return s;
  }
  if (size >= kBufferBytes) {
    return WriteAll(fd_, static_cast<const char*>(data), size, temp_path_);
  }
  buffer_.append(static_cast<const char*>(data), size);
  return absl::OkStatus();
}

absl::Status DurableFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (::fsync(fd_) != 0) return FileErrno(errno, "fsyncing", temp_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return FileErrno(errno, "closing", temp_path_);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return FileErrno(errno, absl::StrCat("renaming ", temp_path_, " to"), path_);
  }
  committed_ = true;
  digest_ = hasher_.HexDigest();
  return FsyncDirectory(dir_);
}

absl::Status WriteFileDurably(const std::string& dir, const std::string& name,
                              absl::string_view data) {
  absl::StatusOr<std::unique_ptr<DurableFileWriter>> writer = DurableFileWriter::Create(dir, name);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(data); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return FileErrno(errno, "listing", dir);
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileErrno(errno, "opening directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return FileErrno(err, "fsyncing directory", dir);
  return absl::OkStatus();
}

}  // namespace tessera

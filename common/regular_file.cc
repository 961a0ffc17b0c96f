// See regular_file.h.
#include "common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/durable_file.h"

namespace tessera {

absl::StatusOr<int> OpenRegularFile(const std::string& path, Symlinks symlinks) {
  const int flags =
      O_RDONLY | O_NONBLOCK | O_CLOEXEC | (symlinks == Symlinks::kRefuse ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    if (errno == ELOOP && symlinks == Symlinks::kRefuse) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a symbolic link"));
    }
    return FileErrno(errno, "opening", path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is not a regular file"));
  }
  // Reads of a regular file never block anyway; back to the ordinary mode.
  const int mode = ::fcntl(fd, F_GETFL);
  if (mode >= 0) ::fcntl(fd, F_SETFL, mode & ~O_NONBLOCK);
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            Symlinks symlinks) {
  absl::StatusOr<int> opened = OpenRegularFile(path, symlinks);
  if (!opened.ok()) return opened.status();
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{*opened};
  struct stat st;
  if (::fstat(closer.fd, &st) != 0) return FileErrno(errno, "reading", path);
  if (st.st_size > max_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat(path, ": ", st.st_size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(closer.fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileErrno(errno, "reading", path);
    }
    if (n == 0) break;  // shrank while reading: the caller's size check notices
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return data;
}

}  // namespace tessera

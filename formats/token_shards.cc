// Listing a data source's token files (see token_shards.h).
#include "formats/token_shards.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

absl::Status ErrnoStatus(const std::string& path, int error) {
  const std::string message = absl::StrCat(path, ": ", std::strerror(error));
  if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

bool IsShardName(const std::string& name) {
  return !name.empty() && name[0] != '.' && !absl::StrContains(name, ".tmp.");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListTokenShards(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
  if (S_ISREG(st.st_mode)) return std::vector<std::string>{path};
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is neither a token file nor a directory of token files"));
  }
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus(path, errno);
  std::vector<std::string> names;
  bool too_many = false;
  errno = 0;
  while (struct dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (!IsShardName(name)) continue;
    struct stat entry_stat;
    const std::string full = absl::StrCat(path, "/", name);
    if (::stat(full.c_str(), &entry_stat) != 0 || !S_ISREG(entry_stat.st_mode)) continue;
    if (static_cast<int64_t>(names.size()) >= kMaxTokenShardsPerSource) {
      too_many = true;
      break;
    }
    names.push_back(name);
  }
  const int read_error = errno;
  ::closedir(dir);
  if (too_many) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds more than ",
                                                   kMaxTokenShardsPerSource, " token files"));
  }
  if (read_error != 0) return ErrnoStatus(path, read_error);
  if (names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": directory holds no token files (regular files not starting "
                           "with \".\")"));
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> files;
  files.reserve(names.size());
  for (const std::string& name : names) files.push_back(absl::StrCat(path, "/", name));
  return files;
}

}  // namespace tessera

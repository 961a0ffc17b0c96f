// Keeping a worker's writes under its data root (see data_root.h).
#include "common/data_root.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer) == nullptr) return absl::NotFoundError(std::strerror(errno));
  return std::string(buffer);
}

}  // namespace

absl::StatusOr<std::string> CanonicalDataRoot(const std::string& flag, const std::string& root) {
  if (root.empty()) return std::string();
  struct stat st;
  if (stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", root, " is not an existing directory"));
  }
  absl::StatusOr<std::string> real = RealPath(root);
  if (!real.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", root, ": ", real.status().message()));
  }
  return real;
}

absl::StatusOr<std::string> ResolvePath(const std::string& field, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must be set"));
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": contains a NUL byte"));
  }
  std::string absolute = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": relative path and no working directory: ", std::strerror(errno)));
    }
    absolute = absl::StrCat(cwd, "/", path);
  }
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(absolute, '/', absl::SkipEmpty())) {
    if (p != ".") parts.emplace_back(p);
  }
  // The longest prefix that exists, with its symlinks resolved; the rest is
  // created later and must not climb out with "..".
  for (size_t n = parts.size() + 1; n-- > 0;) {
    const std::string prefix =
        absl::StrCat("/", absl::StrJoin(parts.begin(), parts.begin() + n, "/"));
    absl::StatusOr<std::string> real = RealPath(prefix);
    if (!real.ok()) continue;
    std::string resolved = *real;
    for (size_t i = n; i < parts.size(); ++i) {
      if (parts[i] == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": \"", path,
                         "\" climbs out with \"..\" below a directory that does not exist"));
      }
      absl::StrAppend(&resolved, resolved == "/" ? "" : "/", parts[i]);
    }
    return resolved;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve \"", path, "\""));
}

absl::Status CheckUnderDataRoot(const std::string& canonical_root, const std::string& field,
                                const std::string& path) {
  if (canonical_root.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> resolved = ResolvePath(field, path);
  if (!resolved.ok()) return resolved.status();
  const bool inside = *resolved == canonical_root || canonical_root == "/" ||
                      absl::StartsWith(*resolved, absl::StrCat(canonical_root, "/"));
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": \"", path, "\" resolves to ",
                                                   *resolved, ", outside the data root ",
                                                   canonical_root, " where this server may write"));
  }
  return absl::OkStatus();
}

}  // namespace tessera

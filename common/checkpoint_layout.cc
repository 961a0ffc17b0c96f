// Checkpoint directory names, path checks, the commit marker and step
// removal (see checkpoint_layout.h).
#include "common/checkpoint_layout.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/durable_file.h"
#include "common/regular_file.h"
#include "common/sha256.h"

namespace tessera {
namespace {

constexpr char kMarkerMagic[] = "tessera-checkpoint-commit 1";
constexpr int64_t kMaxMarkerBytes = 4096;

// "key value" on one line; returns the value.
std::optional<std::string> Field(absl::string_view line, absl::string_view key) {
  if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) return std::nullopt;
  return std::string(line);
}

absl::Status MkdirIfMissing(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return FileErrno(errno, "checking", path);
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  return FileErrno(errno, "creating directory", path);
}

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrCat("step-", step); }

std::string StepDir(const std::string& root, int64_t step) {
  return absl::StrCat(root, "/", StepDirName(step));
}

std::string RankManifestName(int rank) { return absl::StrCat("rank-", rank, ".manifest"); }

std::optional<int64_t> ParseStepDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step-") || name.empty() || name.size() > 18) return std::nullopt;
  if (name.size() > 1 && name[0] == '0') return std::nullopt;  // one spelling per step
  int64_t step = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

absl::Status ValidateCheckpointRoot(const std::string& root) {
  if (root.empty()) return absl::InvalidArgumentError("checkpoint.dir: must be set");
  if (root.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("checkpoint.dir: contains a NUL byte");
  }
  for (absl::string_view part : absl::StrSplit(root, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.dir: \"", root, "\" has a \"..\" component, which could escape the "
          "checkpoint root; give the directory without it"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateEntryName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." ||
      name.find('/') != absl::string_view::npos ||
      std::any_of(name.begin(), name.end(), [](char c) { return c >= 0 && c < 0x20; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint file name \"", absl::CHexEscape(name.substr(0, 300)),
        "\" is not a plain file name inside its step directory (it would escape the "
        "checkpoint root)"));
  }
  return absl::OkStatus();
}

absl::Status CreateCheckpointRoot(const std::string& root) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  // Each prefix ending before a '/', then the root itself.
  std::vector<std::string> levels;
  for (size_t slash = root.find('/', 1); slash != std::string::npos;
       slash = root.find('/', slash + 1)) {
    levels.push_back(root.substr(0, slash));
  }
  levels.push_back(root);
  for (const std::string& level : levels) {
    if (level.empty() || level.back() == '/') continue;  // "//" or a trailing '/'
    if (::mkdir(level.c_str(), 0755) == 0 || errno == EEXIST) {
      struct stat st;
      if (::stat(level.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint.dir: ", level, " exists and is not a directory (creating ", root, ")"));
      }
      continue;
    }
    const int err = errno;
    if (err == ENOTDIR || err == ENAMETOOLONG || err == ELOOP) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint.dir: creating directory ", level,
                                                     ": ", std::strerror(err)));
    }
    const absl::Status s = FileErrno(err, "creating directory", level);
    return absl::Status(s.code(), absl::StrCat("checkpoint.dir: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CreateStepDir(const std::string& root, int64_t step) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  if (absl::Status s = MkdirIfMissing(root); !s.ok()) return s;
  return MkdirIfMissing(StepDir(root, step));
}

absl::StatusOr<std::vector<int64_t>> ListStepDirs(const std::string& root) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  std::vector<int64_t> steps;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root);
  if (absl::IsNotFound(names.status())) return steps;
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (std::optional<int64_t> step = ParseStepDirName(name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status WriteCommitMarker(const std::string& root, const CommitRecord& record) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  const std::string body = absl::StrCat(kMarkerMagic, "\nstep ", record.step, "\nworld_size ",
                                        record.world_size, "\n");
  return WriteFileDurably(StepDir(root, record.step), kCommitMarkerName,
                          absl::StrCat(body, "sha256 ", Sha256Hex(body), "\n"));
}

absl::StatusOr<CommitRecord> ReadCommitMarker(const std::string& root, int64_t step) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  const std::string path = absl::StrCat(StepDir(root, step), "/", kCommitMarkerName);
  absl::StatusOr<std::string> text =
      ReadRegularFile(path, kMaxMarkerBytes, Symlinks::kRefuse);
  if (text.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("step ", step, " has no committed checkpoint under ", root));
  }
  if (!text.ok()) return absl::DataLossError(std::string(text.status().message()));
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };
  std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  if (lines.size() != 5 || !lines[4].empty() || lines[0] != kMarkerMagic) {
    return corrupt("not a commit marker");
  }
  const std::string body = absl::StrCat(lines[0], "\n", lines[1], "\n", lines[2], "\n");
  std::optional<std::string> digest = Field(lines[3], "sha256");
  if (!digest || *digest != Sha256Hex(body)) return corrupt("checksum mismatch");
  std::optional<std::string> step_text = Field(lines[1], "step");
  std::optional<std::string> world_text = Field(lines[2], "world_size");
  CommitRecord record;
  if (!step_text || !world_text || !absl::SimpleAtoi(*step_text, &record.step) ||
      !absl::SimpleAtoi(*world_text, &record.world_size) || record.world_size < 1) {
    return corrupt("malformed fields");
  }
  if (record.step != step) {
    return corrupt(absl::StrCat("records step ", record.step, ", not ", step));
  }
  return record;
}

absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root) {
  absl::StatusOr<std::vector<int64_t>> steps = ListStepDirs(root);
  if (!steps.ok()) return steps.status();
  std::vector<int64_t> committed;
  for (int64_t step : *steps) {
    absl::StatusOr<CommitRecord> record = ReadCommitMarker(root, step);
    if (record.ok()) {
      committed.push_back(step);
    } else if (record.status().code() != absl::StatusCode::kNotFound) {
      return record.status();
    }
  }
  return committed;
}

absl::Status RemoveStepDir(const std::string& root, int64_t step) {
  if (absl::Status s = ValidateCheckpointRoot(root); !s.ok()) return s;
  const std::string dir_path = StepDir(root, step);
  struct stat st;
  if (::lstat(dir_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return FileErrno(errno, "checking", dir_path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir_path, ": is not a directory; not removing it"));
  }
  const std::string marker = absl::StrCat(dir_path, "/", kCommitMarkerName);
  if (::unlink(marker.c_str()) == 0) {
    if (absl::Status s = FsyncDirectory(dir_path); !s.ok()) return s;
  } else if (errno != ENOENT) {
    return FileErrno(errno, "removing", marker);
  }
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return FileErrno(errno, "listing", dir_path);
  absl::Status status;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = absl::StrCat(dir_path, "/", name);
    if (::lstat(path.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
      status = absl::FailedPreconditionError(absl::StrCat(
          path, ": not a regular file; a checkpoint step directory holds only files, so it is "
          "left in place"));
      break;
    }
    if (::unlink(path.c_str()) != 0) {
      status = FileErrno(errno, "removing", path);
      break;
    }
  }
  ::closedir(dir);
  if (!status.ok()) return status;
  if (::rmdir(dir_path.c_str()) != 0) return FileErrno(errno, "removing", dir_path);
  return FsyncDirectory(root);
}

}  // namespace tessera

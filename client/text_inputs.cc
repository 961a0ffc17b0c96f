// Expanding input names and reading texts (see text_inputs.h). zlib's gzFile
// does the gzip detection: it looks at the first bytes and reads anything
// without gzip's magic number unchanged, so one reader serves both.
#include "client/text_inputs.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/regular_file.h"

namespace tessera {
namespace {

bool LooksLikeGlob(const std::string& name) {
  return name.find_first_of("*?[") != std::string::npos;
}

// Appends the regular files below `dir`, sorted at each level.
absl::Status AddDirectory(const std::string& dir, std::vector<TextInput>* inputs) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot list this directory: ", std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (dirent* entry = readdir(d)) {
    if (entry->d_name[0] != '.') names.push_back(entry->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, absl::EndsWith(dir, "/") ? "" : "/", name);
    struct stat link_info, info;
    if (lstat(path.c_str(), &link_info) != 0 || stat(path.c_str(), &info) != 0) continue;
    if (S_ISDIR(info.st_mode)) {
      if (S_ISLNK(link_info.st_mode)) continue;  // a link to a directory could loop
      if (absl::Status s = AddDirectory(path, inputs); !s.ok()) return s;
    } else if (S_ISREG(info.st_mode)) {
      inputs->push_back({path, static_cast<int64_t>(info.st_size)});
    }
  }
  return absl::OkStatus();
}

// Appends what one existing path stands for.
absl::Status AddPath(const std::string& name, const struct stat& info,
                     std::vector<TextInput>* inputs) {
  if (S_ISDIR(info.st_mode)) {
    const size_t before = inputs->size();
    if (absl::Status s = AddDirectory(name, inputs); !s.ok()) return s;
    if (inputs->size() == before) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": this directory holds no text file"));
    }
    return absl::OkStatus();
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a regular file or directory (a FIFO or device?)"));
  }
  inputs->push_back({name, static_cast<int64_t>(info.st_size)});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TextInput>> ExpandTextInputs(const std::vector<std::string>& names) {
  std::vector<TextInput> inputs;
  bool stdin_seen = false;
  for (const std::string& name : names) {
    if (name == kStandardInputName) {
      if (stdin_seen) {
        return absl::InvalidArgumentError("\"-\" (standard input) can be given only once");
      }
      stdin_seen = true;
      inputs.push_back({name, -1});
      continue;
    }
    struct stat info;
    if (stat(name.c_str(), &info) == 0) {
      if (absl::Status s = AddPath(name, info, &inputs); !s.ok()) return s;
      continue;
    }
    if (!LooksLikeGlob(name)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": no such file or directory"));
    }
    glob_t matches;
    const int found = glob(name.c_str(), 0, nullptr, &matches);  // glob sorts its matches
    if (found == GLOB_NOMATCH) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": this pattern matches no file"));
    }
    if (found != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": cannot expand this pattern"));
    }
    absl::Status status;
    for (size_t i = 0; i < matches.gl_pathc && status.ok(); ++i) {
      const std::string path = matches.gl_pathv[i];
      if (stat(path.c_str(), &info) != 0) continue;  // vanished since glob listed it
      status = AddPath(path, info, &inputs);
    }
    globfree(&matches);
    if (!status.ok()) return status;
  }
  return inputs;
}

absl::StatusOr<std::unique_ptr<TextInputReader>> TextInputReader::Open(const TextInput& input) {
  int fd = STDIN_FILENO;
  if (input.is_stdin()) {
    fd = dup(STDIN_FILENO);
    if (fd < 0) return absl::InvalidArgumentError("standard input cannot be read");
  } else {
    absl::StatusOr<int> opened = OpenRegularFile(input.path, Symlinks::kFollow);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat(input.path, ": cannot be read (",
                                       opened.status().message(), ")"));
    }
    fd = *opened;
  }
  gzFile gz = gzdopen(fd, "rb");
  if (gz == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(input.path, ": cannot start reading"));
  }
  gzbuffer(gz, 1 << 18);
  return std::unique_ptr<TextInputReader>(new TextInputReader(input.path, gz, false));
}

TextInputReader::TextInputReader(std::string name, void* gz, bool gzip)
    : name_(std::move(name)), gz_(gz), gzip_(gzip) {}

TextInputReader::~TextInputReader() { gzclose_r(static_cast<gzFile>(gz_)); }

absl::StatusOr<int64_t> TextInputReader::Read(int64_t max_bytes, std::string* text) {
  gzFile gz = static_cast<gzFile>(gz_);
  const size_t before = text->size();
  const unsigned want = static_cast<unsigned>(std::min<int64_t>(max_bytes, 1 << 30));
  text->resize(before + want);
  const int n = gzread(gz, text->data() + before, want);
  gzip_ = gzdirect(gz) == 0;
  int error = Z_OK;
  const char* message = gzerror(gz, &error);
  if (n < 0 || (error != Z_OK && error != Z_BUF_ERROR)) {
    text->resize(before);
    if (error == Z_ERRNO) {
      return absl::DataLossError(absl::StrCat(name_, ": read failed: ", std::strerror(errno)));
    }
    return absl::DataLossError(absl::StrCat(name_, ": corrupt gzip data (", message, ")"));
  }
  text->resize(before + n);
  if (n == 0 && error == Z_BUF_ERROR) {
    return absl::DataLossError(
        absl::StrCat(name_, ": gzip data ends early (the file is truncated)"));
  }
  return static_cast<int64_t>(n);
}

int64_t TextInputReader::disk_bytes_read() const {
  const z_off_t offset = gzoffset(static_cast<gzFile>(gz_));
  return offset < 0 ? 0 : static_cast<int64_t>(offset);
}

}  // namespace tessera

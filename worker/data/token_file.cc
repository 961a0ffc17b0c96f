// Token file writing and memory-mapped reading (see token_file.h).
#include "worker/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status WriteTokenFile(const std::string& path, absl::Span<const uint32_t> tokens) {
  uint32_t max_token = 0;
  for (uint32_t t : tokens) max_token = std::max(max_token, t);
  if (max_token == UINT32_MAX) {
    return absl::InvalidArgumentError("tokens: id 2^32-1 leaves no room for vocab_hint");
  }
  const bool wide = max_token > 0xffff;
  uint8_t header[kTokenFileHeaderBytes] = {0};
  std::memcpy(header, kTokenFileMagic, 8);
  uint32_t version = kTokenFileVersion, dtype = wide ? 2 : 1, vocab_hint = max_token + 1, zero = 0;
  uint64_t count = tokens.size();
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &dtype, 4);
  std::memcpy(header + 16, &count, 8);
  std::memcpy(header + 24, &vocab_hint, 4);
  std::memcpy(header + 28, &zero, 4);

  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  bool ok = std::fwrite(header, 1, sizeof(header), f) == sizeof(header);
  if (wide) {
    ok = ok && std::fwrite(tokens.data(), 4, tokens.size(), f) == tokens.size();
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    ok = ok && std::fwrite(narrow.data(), 2, narrow.size(), f) == narrow.size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("token file ", path, " cannot be opened"));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", why));
  };
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return bad("not a regular file");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kTokenFileHeaderBytes) {
    close(fd);
    return bad("not a Tessera token file (shorter than its header)");
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return bad("mmap failed");
  auto file = std::unique_ptr<TokenFile>(new TokenFile());
  file->map_ = map;
  file->map_bytes_ = bytes;
  const uint8_t* p = static_cast<const uint8_t*>(map);
  if (std::memcmp(p, kTokenFileMagic, 8) != 0) return bad("not a Tessera token file (bad magic)");
  uint32_t version, dtype, vocab_hint;
  uint64_t count;
  std::memcpy(&version, p + 8, 4);
  std::memcpy(&dtype, p + 12, 4);
  std::memcpy(&count, p + 16, 8);
  std::memcpy(&vocab_hint, p + 24, 4);
  if (version != kTokenFileVersion) {
    return bad(absl::StrCat("unsupported version ", version, " (this build reads version ",
                            kTokenFileVersion, ")"));
  }
  if (dtype != 1 && dtype != 2) return bad(absl::StrCat("unknown token dtype ", dtype));
  file->wide_ = dtype == 2;
  const size_t width = file->wide_ ? 4 : 2;
  const size_t payload = bytes - kTokenFileHeaderBytes;
  const size_t held = payload / width;
  if (held < count) {
    return bad(absl::StrCat("truncated: header says ", count, " tokens but the file holds ", held));
  }
  if (held > count || payload % width != 0) {
    return bad(absl::StrCat("header says ", count, " tokens but the file holds ", payload,
                            " bytes of tokens (", held, " tokens and change): trailing data"));
  }
  file->tokens_ = p + kTokenFileHeaderBytes;
  file->count_ = static_cast<int64_t>(count);
  // One pass at open: the batch source checks the largest id against the
  // model's vocabulary before training starts, and a corrupt file shows here.
  for (int64_t i = 0; i < file->count_; ++i) {
    file->max_token_ = std::max(file->max_token_, file->Token(i));
  }
  if (count > 0 && static_cast<uint64_t>(file->max_token_) >= vocab_hint) {
    return bad(absl::StrCat("holds token id ", file->max_token_, " but its vocab_hint is ",
                            vocab_hint, " (corrupt file)"));
  }
  return file;
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

}  // namespace tessera

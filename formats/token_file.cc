// Token file writing, header parsing and memory-mapped reading (see
// token_file.h).
#include "formats/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/regular_file.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr size_t kHashBytes = 32;

absl::Status Malformed(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", why));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// 64 lowercase hex characters to 32 bytes; false if malformed.
bool HexToBytes(const std::string& hex, uint8_t* out) {
  if (hex.size() != 2 * kHashBytes) return false;
  for (size_t i = 0; i < kHashBytes; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

// Empty for an all-zero hash (no model file).
std::string BytesToHex(const uint8_t* bytes) {
  if (std::all_of(bytes, bytes + kHashBytes, [](uint8_t b) { return b == 0; })) return "";
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * kHashBytes, '0');
  for (size_t i = 0; i < kHashBytes; ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return hex;
}

// Parses the header at p, of which `available` bytes exist.
absl::StatusOr<TokenFileHeader> ParseHeader(const uint8_t* p, size_t available,
                                            const std::string& path) {
  if (available < kTokenFileV1HeaderBytes) {
    return Malformed(path, "not a Tessera token file (shorter than its header)");
  }
  if (std::memcmp(p, kTokenFileMagic, 8) != 0) {
    return Malformed(path, "not a Tessera token file (bad magic)");
  }
  TokenFileHeader h;
  uint32_t dtype;
  std::memcpy(&h.version, p + 8, 4);
  std::memcpy(&dtype, p + 12, 4);
  std::memcpy(&h.count, p + 16, 8);
  std::memcpy(&h.vocab_hint, p + 24, 4);
  if (h.version < 1 || h.version > kTokenFileVersion) {
    return Malformed(path, absl::StrCat("unsupported version ", h.version,
                                        " (this build reads versions 1 to ",
                                        kTokenFileVersion, ")"));
  }
  if (dtype != 1 && dtype != 2) return Malformed(path, absl::StrCat("unknown token dtype ", dtype));
  h.wide = dtype == 2;
  if (h.version == 1) {
    h.header_bytes = kTokenFileV1HeaderBytes;
    return h;
  }
  h.header_bytes = kTokenFileHeaderBytes;
  if (available < kTokenFileHeaderBytes) {
    return Malformed(path, absl::StrCat("not a Tessera token file (shorter than its version ",
                                        h.version, " header)"));
  }
  uint32_t kind;
  std::memcpy(&kind, p + 28, 4);
  std::memcpy(&h.tokenizer.vocab_size, p + 32, 4);
  if (kind > static_cast<uint32_t>(TokenizerKind::kSentencePiece)) {
    return Malformed(path, absl::StrCat("unknown tokenizer kind ", kind));
  }
  h.tokenizer.kind = static_cast<TokenizerKind>(kind);
  h.tokenizer.model_sha256 = BytesToHex(p + 40);
  if (h.tokenizer.recorded() && h.tokenizer.vocab_size == 0) {
    return Malformed(path, "records a tokenizer with an empty vocabulary");
  }
  if (h.version < 3) return h;  // bytes 36..39 and 72..79 reserved: no index
  uint32_t flags;
  std::memcpy(&flags, p + 36, 4);
  std::memcpy(&h.document_count, p + 72, 8);
  if ((flags & ~kTokenFileHasDocumentIndex) != 0) {
    return Malformed(path, absl::StrCat("unknown flags 0x", absl::Hex(flags)));
  }
  h.has_document_index = (flags & kTokenFileHasDocumentIndex) != 0;
  if (!h.has_document_index && h.document_count != 0) {
    return Malformed(path, absl::StrCat("records ", h.document_count,
                                        " documents but no document index flag"));
  }
  if (h.has_document_index && (h.document_count == 0) != (h.count == 0)) {
    return Malformed(path, absl::StrCat("document index: ", h.document_count, " documents for ",
                                        h.count, " tokens (every token lies in a document)"));
  }
  return h;
}

// Bytes of `count` tokens of `width` bytes padded to a multiple of 8, where
// a version 3 document index begins.
uint64_t PaddedTokenBytes(uint64_t count, size_t width) { return (count * width + 7) / 8 * 8; }

// Document starts must begin at 0, strictly increase and stay below the
// token count. The reason, or empty when they are valid.
std::string DocumentStartsProblem(absl::Span<const uint64_t> starts, uint64_t count) {
  for (size_t i = 0; i < starts.size(); ++i) {
    if (i == 0 && starts[0] != 0) return absl::StrCat("document start [0] is ", starts[0], ", not 0");
    if (i > 0 && starts[i] <= starts[i - 1]) {
      return absl::StrCat("document starts are not strictly increasing: [", i - 1, "] = ",
                          starts[i - 1], ", [", i, "] = ", starts[i]);
    }
    if (starts[i] >= count) {
      return absl::StrCat("document start [", i, "] = ", starts[i], " is out of range (",
                          count, " tokens)");
    }
  }
  if (starts.empty() && count > 0) return absl::StrCat("no document starts for ", count, " tokens");
  return "";
}

}  // namespace

std::string TokenizerInfo::ToString() const {
  switch (kind) {
    case TokenizerKind::kNotRecorded:
      return "not recorded";
    case TokenizerKind::kByte:
      return absl::StrCat("byte-level (vocab ", vocab_size, ")");
    case TokenizerKind::kSentencePiece:
      return absl::StrCat("sentencepiece (vocab ", vocab_size, ", model sha256 ",
                          model_sha256.empty() ? "unknown" : model_sha256, ")");
  }
  return "unknown";
}

absl::Status WriteTokenFile(const std::string& path, absl::Span<const uint32_t> tokens,
                            const TokenizerInfo& tokenizer,
                            std::optional<absl::Span<const uint64_t>> document_starts) {
  uint32_t max_token = 0;
  for (uint32_t t : tokens) max_token = std::max(max_token, t);
  if (max_token == UINT32_MAX) {
    return absl::InvalidArgumentError("tokens: id 2^32-1 leaves no room for vocab_hint");
  }
  uint8_t hash[kHashBytes] = {0};
  if (tokenizer.recorded()) {
    if (tokenizer.vocab_size == 0) {
      return absl::InvalidArgumentError("tokenizer.vocab_size: must be > 0 when a tokenizer is named");
    }
    if (!tokens.empty() && max_token >= tokenizer.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens: id ", max_token, " lies outside the ", tokenizer.ToString(),
                       " tokenizer's vocabulary"));
    }
    if (!tokenizer.model_sha256.empty() && !HexToBytes(tokenizer.model_sha256, hash)) {
      return absl::InvalidArgumentError(
          "tokenizer.model_sha256: must be 64 lowercase hex characters");
    }
  }
  if (document_starts.has_value()) {
    const std::string problem = DocumentStartsProblem(*document_starts, tokens.size());
    if (!problem.empty()) return absl::InvalidArgumentError(absl::StrCat("document_starts: ", problem));
  }
  const bool wide = max_token > 0xffff;
  uint8_t header[kTokenFileHeaderBytes] = {0};
  std::memcpy(header, kTokenFileMagic, 8);
  const uint32_t version =
      document_starts.has_value() ? kTokenFileVersion : kTokenFileVersionNoDocuments;
  const uint32_t dtype = wide ? 2 : 1, vocab_hint = max_token + 1;
  const uint32_t kind = static_cast<uint32_t>(tokenizer.kind);
  const uint32_t tokenizer_vocab = tokenizer.recorded() ? tokenizer.vocab_size : 0;
  const uint64_t count = tokens.size();
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &dtype, 4);
  std::memcpy(header + 16, &count, 8);
  std::memcpy(header + 24, &vocab_hint, 4);
  std::memcpy(header + 28, &kind, 4);
  std::memcpy(header + 32, &tokenizer_vocab, 4);
  std::memcpy(header + 40, hash, kHashBytes);
  if (document_starts.has_value()) {
    const uint32_t flags = kTokenFileHasDocumentIndex;
    const uint64_t documents = document_starts->size();
    std::memcpy(header + 36, &flags, 4);
    std::memcpy(header + 72, &documents, 8);
  }

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
  if (document_starts.has_value()) {
    const size_t width = wide ? 4 : 2;
    const size_t padding = PaddedTokenBytes(count, width) - count * width;
    const uint8_t zeros[8] = {0};
    ok = ok && std::fwrite(zeros, 1, padding, f) == padding;
    ok = ok && std::fwrite(document_starts->data(), 8, document_starts->size(), f) ==
                   document_starts->size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  }
  return absl::OkStatus();
}

namespace {

// The path opened without blocking (a FIFO there would otherwise wait for
// a writer forever): NOT_FOUND when it cannot be opened, INVALID_ARGUMENT
// for anything but a regular file.
absl::StatusOr<int> OpenTokenFile(const std::string& path) {
  absl::StatusOr<int> fd = OpenRegularFile(path, Symlinks::kFollow);
  if (fd.ok()) return fd;
  if (fd.status().code() == absl::StatusCode::kInvalidArgument) {
    return Malformed(path, "not a regular file");
  }
  return absl::NotFoundError(absl::StrCat("token file ", path, " cannot be opened"));
}

}  // namespace

absl::StatusOr<TokenFileHeader> ReadTokenFileHeader(const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, OpenTokenFile(path));
  uint8_t header[kTokenFileHeaderBytes];
  size_t got = 0;
  while (got < sizeof(header)) {
    const ssize_t n = read(fd, header + got, sizeof(header) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  return ParseHeader(header, got, path);
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, OpenTokenFile(path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Malformed(path, "cannot be read");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kTokenFileV1HeaderBytes) {
    close(fd);
    return Malformed(path, "not a Tessera token file (shorter than its header)");
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return Malformed(path, "mmap failed");
  auto file = std::unique_ptr<TokenFile>(new TokenFile());
  file->map_ = map;
  file->map_bytes_ = bytes;
  const uint8_t* p = static_cast<const uint8_t*>(map);
  absl::StatusOr<TokenFileHeader> header = ParseHeader(p, bytes, path);
  if (!header.ok()) return header.status();
  file->wide_ = header->wide;
  file->tokenizer_ = header->tokenizer;
  const uint64_t count = header->count;
  const size_t width = file->wide_ ? 4 : 2;
  // Version 3 with an index: the index follows the padded tokens and ends
  // the file. Its size is checked here and its contents after the tokens.
  size_t payload = bytes - header->header_bytes;
  if (header->has_document_index) {
    const uint64_t documents = header->document_count;
    if (count > payload / width || documents > payload / 8) {
      return Malformed(path, absl::StrCat("truncated: header says ", count, " tokens and ",
                                          documents, " document starts but the file holds ",
                                          payload, " bytes after its header"));
    }
    const uint64_t token_bytes = PaddedTokenBytes(count, width);
    const uint64_t want = token_bytes + documents * 8;
    if (payload < want) {
      return Malformed(path, absl::StrCat("document index truncated: header says ", count,
                                          " tokens and ", documents, " document starts (",
                                          want, " bytes) but the file holds ", payload,
                                          " bytes after its header"));
    }
    if (payload > want) {
      return Malformed(path, absl::StrCat("trailing data: ", payload - want,
                                          " bytes after the document index"));
    }
    file->has_document_index_ = true;
    file->document_starts_ = absl::MakeConstSpan(
        reinterpret_cast<const uint64_t*>(p + header->header_bytes + token_bytes), documents);
    const std::string problem = DocumentStartsProblem(file->document_starts_, count);
    if (!problem.empty()) return Malformed(path, absl::StrCat("document index: ", problem));
    payload = count * width;
  }
  const size_t held = payload / width;
  if (held < count) {
    return Malformed(path, absl::StrCat("truncated: header says ", count,
                                        " tokens but the file holds ", held));
  }
  if (held > count || payload % width != 0) {
    return Malformed(path, absl::StrCat("header says ", count, " tokens but the file holds ",
                                        payload, " bytes of tokens (", held,
                                        " tokens and change): trailing data"));
  }
  file->tokens_ = p + header->header_bytes;
  file->count_ = static_cast<int64_t>(count);
  // One pass at open: the batch source checks the largest id against the
  // model's vocabulary before training starts, and a corrupt file shows here.
  for (int64_t i = 0; i < file->count_; ++i) {
    file->max_token_ = std::max(file->max_token_, file->Token(i));
  }
  if (count > 0 && static_cast<uint64_t>(file->max_token_) >= header->vocab_hint) {
    return Malformed(path, absl::StrCat("holds token id ", file->max_token_,
                                        " but its vocab_hint is ", header->vocab_hint,
                                        " (corrupt file)"));
  }
  if (count > 0 && file->tokenizer_.recorded() &&
      file->max_token_ >= file->tokenizer_.vocab_size) {
    return Malformed(path, absl::StrCat("holds token id ", file->max_token_, " but its tokenizer, ",
                                        file->tokenizer_.ToString(), ", has no such id (corrupt file)"));
  }
  return file;
}

int64_t TokenFile::DocumentStartAt(int64_t token) const {
  if (document_starts_.empty()) return 0;
  const auto after = std::upper_bound(document_starts_.begin(), document_starts_.end(),
                                      static_cast<uint64_t>(token));
  return static_cast<int64_t>(*(after - 1));
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

}  // namespace tessera

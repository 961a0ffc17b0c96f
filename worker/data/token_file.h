// The Tessera token file: a versioned binary format that workers
// memory-map.
//
//   offset 0   char[8]  magic "TSRTOKN\0"
//   offset 8   uint32   version (1)
//   offset 12  uint32   token dtype: 1 = uint16, 2 = uint32
//   offset 16  uint64   token count
//   offset 24  uint32   vocab hint: max token id + 1
//   offset 28  uint32   reserved (0)
//   offset 32  tokens, little-endian
#ifndef TESSERA_WORKER_DATA_TOKEN_FILE_H_
#define TESSERA_WORKER_DATA_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera {

inline constexpr char kTokenFileMagic[8] = {'T', 'S', 'R', 'T', 'O', 'K', 'N', '\0'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 32;

// Writes atomically (temp file + rename); uint16 tokens when all fit.
// INVALID_ARGUMENT for the id 2^32-1 (vocab_hint would overflow).
absl::Status WriteTokenFile(const std::string& path, absl::Span<const uint32_t> tokens);

class TokenFile {
 public:
  // Memory-maps the file read-only. INVALID_ARGUMENT with the reason for a
  // malformed file (bad magic, unsupported version or dtype, truncated or
  // trailing data, a token >= vocab_hint); NOT_FOUND if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  uint32_t Token(int64_t i) const {
    return wide_ ? reinterpret_cast<const uint32_t*>(tokens_)[i]
                 : reinterpret_cast<const uint16_t*>(tokens_)[i];
  }
  // Largest token id in the file (0 when empty), computed once at Open.
  uint32_t max_token() const { return max_token_; }

 private:
  TokenFile() = default;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  bool wide_ = false;
  uint32_t max_token_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_TOKEN_FILE_H_

// The Tessera token file: a versioned binary format that workers
// memory-map, and that says which tokenizer produced its ids, so that a job
// whose vocabulary is too small for them is refused before it starts.
//
// Version 3 (written by this build when document starts are given):
//   offset 0   char[8]   magic "TSRTOKN\0"
//   offset 8   uint32    version (3)
//   offset 12  uint32    token dtype: 1 = uint16, 2 = uint32
//   offset 16  uint64    token count
//   offset 24  uint32    vocab hint: max token id + 1
//   offset 28  uint32    tokenizer kind: 0 = not recorded, 1 = byte-level,
//                        2 = SentencePiece
//   offset 32  uint32    tokenizer vocabulary size (0 when not recorded)
//   offset 36  uint32    flags: bit 0 = the file has a document index;
//                        other bits must be 0
//   offset 40  uint8[32] SHA-256 of the tokenizer's model file (zeros when
//                        the tokenizer has none, e.g. byte-level)
//   offset 72  uint64    document count D (0 without an index)
//   offset 80  tokens, little-endian, then zero padding to a multiple of 8
//              bytes, then D little-endian uint64 document starts: the
//              token index where each document begins. The first is 0,
//              they strictly increase, and each is < the token count.
// Version 2 is the same header with bytes 36..39 and 72..79 reserved (0)
// and nothing after the tokens; version 1 is its first 32 bytes (bytes
// 28..31 reserved) with the tokens at offset 32. Both are still read:
// "tokenizer not recorded" for version 1, and for both "document
// boundaries unknown" (no index).
//
// The writer emits version 3 only when it is given document starts, and
// version 2 otherwise: a file without boundaries then stays readable by
// builds that predate version 3, and only files that carry something new
// need a new reader.
#ifndef TESSERA_FORMATS_TOKEN_FILE_H_
#define TESSERA_FORMATS_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera {

inline constexpr char kTokenFileMagic[8] = {'T', 'S', 'R', 'T', 'O', 'K', 'N', '\0'};
inline constexpr uint32_t kTokenFileVersion = 3;            // newest version read
inline constexpr uint32_t kTokenFileVersionNoDocuments = 2;  // written without document starts
inline constexpr uint32_t kTokenFileHasDocumentIndex = 1;     // flags bit 0
inline constexpr size_t kTokenFileHeaderBytes = 80;
inline constexpr size_t kTokenFileV1HeaderBytes = 32;

enum class TokenizerKind : uint32_t {
  kNotRecorded = 0,  // version 1 files, and ids written without a tokenizer
  kByte = 1,         // one token per byte, vocabulary 256
  kSentencePiece = 2,
};

// Which tokenizer made a token file's ids.
struct TokenizerInfo {
  TokenizerKind kind = TokenizerKind::kNotRecorded;
  uint32_t vocab_size = 0;   // ids lie in [0, vocab_size); 0 when not recorded
  std::string model_sha256;  // 64 lowercase hex characters; empty when there is no model file

  static TokenizerInfo Byte() { return {TokenizerKind::kByte, 256, ""}; }
  bool recorded() const { return kind != TokenizerKind::kNotRecorded; }
  // "byte-level (vocab 256)", "sentencepiece (vocab 512, model sha256 3f2a...)",
  // "not recorded".
  std::string ToString() const;
};

// What the header says, without reading the tokens.
struct TokenFileHeader {
  uint32_t version = 0;
  bool wide = false;  // uint32 tokens
  uint64_t count = 0;
  uint32_t vocab_hint = 0;
  TokenizerInfo tokenizer;
  size_t header_bytes = 0;  // where the tokens start
  // Version 3 files with flag bit 0: the file records where its documents
  // begin. False for versions 1 and 2 (boundaries unknown).
  bool has_document_index = false;
  uint64_t document_count = 0;  // D; 0 without an index
};

// Writes atomically (temp file + rename); uint16 tokens when all fit.
// With `document_starts` (the token index where each document begins) the
// file is version 3 with a document index; without, version 2.
// INVALID_ARGUMENT for the id 2^32-1 (vocab_hint would overflow), for an id
// outside a recorded tokenizer's vocabulary, for a malformed model hash, or
// for document starts that do not begin at 0, strictly increase and stay
// below the token count.
absl::Status WriteTokenFile(
    const std::string& path, absl::Span<const uint32_t> tokens,
    const TokenizerInfo& tokenizer = {},
    std::optional<absl::Span<const uint64_t>> document_starts = std::nullopt);

// Reads and checks only the header (magic, version, dtype, tokenizer
// fields), e.g. to learn the tokenizer without mapping the tokens.
// NOT_FOUND if the file cannot be opened; INVALID_ARGUMENT with the reason
// for a malformed header.
absl::StatusOr<TokenFileHeader> ReadTokenFileHeader(const std::string& path);

class TokenFile {
 public:
  // Memory-maps the file read-only. INVALID_ARGUMENT with the reason for a
  // malformed file (bad magic, unsupported version or dtype, truncated or
  // trailing data, a token >= vocab_hint or >= the tokenizer's vocabulary,
  // a document index that is truncated, not strictly increasing from 0, or
  // points past the tokens); NOT_FOUND if it cannot be opened.
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
  const TokenizerInfo& tokenizer() const { return tokenizer_; }

  // Where each document begins (token indices, strictly increasing from 0),
  // read from the memory map; empty when the file has no index.
  bool has_document_index() const { return has_document_index_; }
  absl::Span<const uint64_t> document_starts() const { return document_starts_; }
  // The start of the document that holds token `token` (in [0, size())):
  // the largest document start <= token, by binary search. 0 for a file
  // without an index, which reads as one document.
  int64_t DocumentStartAt(int64_t token) const;

 private:
  TokenFile() = default;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  bool wide_ = false;
  uint32_t max_token_ = 0;
  TokenizerInfo tokenizer_;
  bool has_document_index_ = false;
  absl::Span<const uint64_t> document_starts_;
};

}  // namespace tessera

#endif  // TESSERA_FORMATS_TOKEN_FILE_H_

// The inputs of `tessera data text`: what the user names on the command line
// becomes an ordered list of texts, and each is read back as its plain
// bytes, gzip or not.
//
// A name is expanded in this order: "-" is standard input; an existing
// directory stands for every regular file below it (recursively, names in
// byte-wise sorted order at each level, skipping names that start with "."
// and not following links to directories, which could loop); an existing
// file is itself; anything else that contains *, ? or [ is a shell-style
// glob, expanded by Tessera (so it works quoted) in sorted order. The order
// of the names given is kept, so the token order is the input order.
//
// A text is gzip when its first two bytes are gzip's magic number (1f 8b),
// whatever its name; concatenated gzip members are read as one stream.
#ifndef TESSERA_CLIENT_TEXT_INPUTS_H_
#define TESSERA_CLIENT_TEXT_INPUTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

inline constexpr char kStandardInputName[] = "-";

struct TextInput {
  std::string path;         // "-" for standard input
  int64_t disk_bytes = -1;  // size as stored (compressed, for gzip); -1 when unknown (stdin)

  bool is_stdin() const { return path == kStandardInputName; }
};

// The texts the names stand for. INVALID_ARGUMENT naming the name for
// nothing there, a glob matching no file, a directory without a file,
// "-" given twice, or a name that is neither file nor directory (a FIFO,
// a device); PERMISSION_DENIED naming a directory that cannot be listed.
absl::StatusOr<std::vector<TextInput>> ExpandTextInputs(const std::vector<std::string>& names);

// Reads one text's bytes, decompressing gzip. Not thread-safe.
class TextInputReader {
 public:
  // NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT naming the path when it
  // cannot be opened as a regular file (standard input is taken as it is).
  static absl::StatusOr<std::unique_ptr<TextInputReader>> Open(const TextInput& input);
  ~TextInputReader();
  TextInputReader(const TextInputReader&) = delete;
  TextInputReader& operator=(const TextInputReader&) = delete;

  // Up to `max_bytes` plain bytes appended to *text; 0 at the end.
  // DATA_LOSS naming the input for corrupt or truncated gzip data or a
  // read error.
  absl::StatusOr<int64_t> Read(int64_t max_bytes, std::string* text);
  // Stored bytes consumed so far (compressed bytes, for gzip).
  int64_t disk_bytes_read() const;
  bool gzip() const { return gzip_; }

 private:
  TextInputReader(std::string name, void* gz, bool gzip);
  std::string name_;
  void* gz_ = nullptr;  // a zlib gzFile, which reads plain files unchanged
  bool gzip_ = false;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_TEXT_INPUTS_H_

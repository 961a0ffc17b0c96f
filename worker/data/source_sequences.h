// One data source (DataSource.path) cut into whole sequences: each token
// file of the source (formats/token_shards.h) gives floor(tokens / (seq_len
// + 1)) sequences of seq_len + 1 consecutive tokens, back to back from its
// first token, so no two overlap and none spans two files; a file's last
// tokens % (seq_len + 1) tokens are never read. A sequence's first seq_len
// tokens are the inputs and its last seq_len the targets. Sequences are
// numbered through the files in the listed order. With document masking
// each sequence also gets its documents (worker/data/document_window.h).
#ifndef TESSERA_WORKER_DATA_SOURCE_SEQUENCES_H_
#define TESSERA_WORKER_DATA_SOURCE_SEQUENCES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "formats/token_file.h"

namespace tessera {

class SourceSequences {
 public:
  // Lists and memory-maps the source's files. INVALID_ARGUMENT starting
  // with `field` (e.g. "data.sources[1]") and naming the path or file: a
  // missing or empty directory, a file that is not a token file, a token id
  // >= vocab_size, or no whole sequence in the whole source; starting with
  // data.document_masking when `document_masking` and a file has no
  // document index.
  static absl::StatusOr<std::unique_ptr<SourceSequences>> Open(const std::string& field,
                                                               const std::string& path,
                                                               int seq_len, int64_t vocab_size,
                                                               bool document_masking = false);

  int64_t count() const { return count_; }

  struct Location {
    int file = 0;        // index into files()
    int64_t offset = 0;  // first token
  };
  Location Locate(int64_t sequence) const;  // sequence in [0, count())
  const std::vector<std::string>& files() const { return paths_; }

  // Sequence `sequence`'s inputs and targets, seq_len each, and its
  // attention document starts unless doc_starts is empty (all zeros
  // without document masking).
  void Read(int64_t sequence, absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
            absl::Span<int32_t> doc_starts) const;

 private:
  SourceSequences() = default;
  int seq_len_ = 0;
  bool document_masking_ = false;
  int64_t count_ = 0;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<TokenFile>> files_;
  std::vector<int64_t> first_sequence_;  // [files + 1]: prefix sums of sequences per file
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_SOURCE_SEQUENCES_H_

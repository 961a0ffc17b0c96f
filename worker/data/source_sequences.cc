// A source's whole sequences across its shard files (see source_sequences.h).
#include "worker/data/source_sequences.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "formats/token_shards.h"
#include "worker/data/document_window.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<SourceSequences>> SourceSequences::Open(const std::string& field,
                                                                       const std::string& path,
                                                                       int seq_len,
                                                                       int64_t vocab_size,
                                                                       bool document_masking) {
  absl::StatusOr<std::vector<std::string>> paths = ListTokenShards(path);
  if (!paths.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", paths.status().message()));
  }
  std::unique_ptr<SourceSequences> source(new SourceSequences());
  source->seq_len_ = seq_len;
  source->document_masking_ = document_masking;
  source->paths_ = std::move(*paths);
  source->first_sequence_.push_back(0);
  const int64_t span = int64_t{seq_len} + 1;
  for (const std::string& file_path : source->paths_) {
    absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(file_path);
    if (!file.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", file.status().message()));
    }
    if (static_cast<int64_t>((*file)->max_token()) >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", file_path, " holds token id ", (*file)->max_token(),
          ", which does not fit model.vocab_size ", vocab_size));
    }
    if (document_masking && !(*file)->has_document_index()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.document_masking: ", field, ": ", file_path,
          " records no document starts (write it with `tessera data text`, version 3)"));
    }
    source->first_sequence_.push_back(source->first_sequence_.back() + (*file)->size() / span);
    source->files_.push_back(std::move(*file));
  }
  source->count_ = source->first_sequence_.back();
  if (source->count_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " holds no whole sequence of model.seq_len + 1 = ", span,
                     " tokens in any file"));
  }
  return source;
}

SourceSequences::Location SourceSequences::Locate(int64_t sequence) const {
  // The last file whose first sequence is <= `sequence` (files with no whole
  // sequence share their first index with the next file and are skipped).
  const auto it =
      std::upper_bound(first_sequence_.begin(), first_sequence_.end(), sequence) - 1;
  Location location;
  location.file = static_cast<int>(it - first_sequence_.begin());
  location.offset = (sequence - *it) * (int64_t{seq_len_} + 1);
  return location;
}

void SourceSequences::Read(int64_t sequence, absl::Span<int32_t> inputs,
                           absl::Span<int32_t> targets, absl::Span<int32_t> doc_starts) const {
  const Location at = Locate(sequence);
  ReadSequence(*files_[at.file], at.offset, document_masking_, inputs.subspan(0, seq_len_),
               targets.subspan(0, seq_len_),
               doc_starts.empty() ? doc_starts : doc_starts.subspan(0, seq_len_));
}

}  // namespace tessera

// A sequence's document starts and masked targets (see document_window.h).
#include "worker/data/document_window.h"

#include <algorithm>

#include "worker/data/ignore_index.h"

namespace tessera {

void MarkDocuments(const TokenFile& file, int64_t offset, absl::Span<int32_t> targets,
                   absl::Span<int32_t> doc_starts) {
  const int64_t seq_len = static_cast<int64_t>(targets.size());
  const absl::Span<const uint64_t> starts = file.document_starts();
  // The first document start inside the window past its first token.
  auto next = std::upper_bound(starts.begin(), starts.end(), static_cast<uint64_t>(offset));
  int32_t current = 0;  // the document of input 0 began at or before it
  for (int64_t i = 0; i < seq_len; ++i) {
    // Token offset + i begins a document: input i starts one, and the
    // target before it (at i - 1) would predict it across the boundary.
    if (next != starts.end() && *next == static_cast<uint64_t>(offset + i)) {
      current = static_cast<int32_t>(i);
      targets[i - 1] = kIgnoreIndex;  // i >= 1: `next` lies past offset
      ++next;
    }
    if (!doc_starts.empty()) doc_starts[i] = current;
  }
  // The token after the last input (the last target) may begin one too.
  if (next != starts.end() && *next == static_cast<uint64_t>(offset + seq_len)) {
    targets[seq_len - 1] = kIgnoreIndex;
  }
}

void ReadSequence(const TokenFile& file, int64_t offset, bool document_masking,
                  absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                  absl::Span<int32_t> doc_starts) {
  for (size_t t = 0; t < inputs.size(); ++t) {
    inputs[t] = static_cast<int32_t>(file.Token(offset + static_cast<int64_t>(t)));
    targets[t] = static_cast<int32_t>(file.Token(offset + static_cast<int64_t>(t) + 1));
  }
  if (document_masking) {
    MarkDocuments(file, offset, targets, doc_starts);
  } else {
    std::fill(doc_starts.begin(), doc_starts.end(), 0);
  }
}

}  // namespace tessera

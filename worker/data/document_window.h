// One training sequence's documents, from its token file's document index
// (formats/token_file.h): a sequence is the seq_len + 1 tokens at
// [offset, offset + seq_len] of a file, its inputs the first seq_len and its
// targets the last seq_len. Under data.document_masking the batch sources
// call MarkDocuments on every sequence they read, so that
//   - attention keeps to documents: doc_starts[i] is the position within
//     the sequence of the first token of the document that holds input i
//     (0 for a document that began before the sequence), in the form
//     Ops::AttentionForward takes (worker/ops/ops.h): doc_starts[0] = 0 and
//     each next entry repeats the previous one or is its own position;
//   - the loss does not ask the model to guess one document's first token
//     from the end of the one before: targets[i] becomes kIgnoreIndex where
//     token offset + i + 1 begins a document. The token itself still is the
//     input at i + 1 and is predicted from nothing earlier; its own
//     successor's target stays.
// Only the index is searched (binary search for the window, then a walk
// over the starts inside it), so the cost is O(log D + documents in view).
#ifndef TESSERA_WORKER_DATA_DOCUMENT_WINDOW_H_
#define TESSERA_WORKER_DATA_DOCUMENT_WINDOW_H_

#include <cstdint>

#include "absl/types/span.h"
#include "formats/token_file.h"

namespace tessera {

// `targets` holds the sequence's seq_len targets, as already read;
// `doc_starts` is empty (attention starts not wanted) or seq_len long.
// The file must have a document index (callers check at open).
void MarkDocuments(const TokenFile& file, int64_t offset, absl::Span<int32_t> targets,
                   absl::Span<int32_t> doc_starts);

// Reads the sequence at `offset` of `file` into `inputs` and `targets`
// (seq_len each) and, under `document_masking`, marks its documents as
// above; otherwise `doc_starts` (empty or seq_len) is all 0: one document.
void ReadSequence(const TokenFile& file, int64_t offset, bool document_masking,
                  absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                  absl::Span<int32_t> doc_starts);

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_DOCUMENT_WINDOW_H_

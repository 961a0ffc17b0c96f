// Text files to a token file with a SentencePiece BPE model, concatenated in
// the order given; the token file records the model (kind, vocabulary size,
// SHA-256) and where each document begins (client/text_documents.h). Only the tessera-sentencepiece helper and tests link this: see
// client/tessera_sentencepiece_main.cc for why.
#ifndef TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_
#define TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/text_documents.h"

namespace tessera {

// Encodes the text files with the model at model_path, line by line (each
// line keeps its newline), and returns the number of tokens written.
// NOT_FOUND names an input or model that cannot be read; INVALID_ARGUMENT
// names the file and line of text that would not decode back to the same
// bytes (text that is not valid UTF-8), so a token file never silently
// differs from its text.
absl::StatusOr<int64_t> BuildSentencePieceTokenFileFromText(
    const std::vector<std::string>& text_paths, const std::string& model_path,
    const std::string& out_path, TextDocuments documents = TextDocuments::kFiles);

}  // namespace tessera

#endif  // TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_

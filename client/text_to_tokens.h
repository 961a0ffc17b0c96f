// Byte-level tokenization of text files: every byte becomes one token in
// [0, 256); files are concatenated in the order given, and the token file
// records the byte-level tokenizer and where each document begins
// (client/text_documents.h). (SentencePiece: sentencepiece_text.h.)
#ifndef TESSERA_CLIENT_TEXT_TO_TOKENS_H_
#define TESSERA_CLIENT_TEXT_TO_TOKENS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/text_documents.h"

namespace tessera {

// NOT_FOUND names an input that cannot be read.
absl::Status BuildByteTokenFileFromText(const std::vector<std::string>& text_paths,
                                        const std::string& out_path,
                                        TextDocuments documents = TextDocuments::kFiles);

}  // namespace tessera

#endif  // TESSERA_CLIENT_TEXT_TO_TOKENS_H_

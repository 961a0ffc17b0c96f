// Text files to a token file with a SentencePiece BPE model, concatenated in
// the order given; the token file records the model (kind, vocabulary size,
// SHA-256) and where each document begins (client/text_documents.h). Only
// the tessera-sentencepiece helper and tests link this: see
// client/tessera_sentencepiece_main.cc for why.
#ifndef TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_
#define TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/corpus_tokenizer.h"
#include "client/sentencepiece_tokenizer.h"
#include "client/text_documents.h"

namespace tessera {

// Encodes lines with a loaded model for TokenizeCorpus, from any number of
// threads (the library's encoder is safe to share once loaded). A line must
// decode back to the same bytes, else INVALID_ARGUMENT: text that is not
// valid UTF-8 (or that holds the library's own whitespace mark, U+2581)
// would otherwise change silently. Decoding costs about 40% of encoding, so
// it is done only for lines that could change: the models keep valid UTF-8
// byte for byte (identity normalisation, byte fallback; the tests hold
// them to it on random text), so only lines with invalid UTF-8, NUL or
// U+2581 are decoded again.
class SentencePieceLineEncoder : public LineEncoder {
 public:
  // NOT_FOUND if the model cannot be read; INVALID_ARGUMENT if it is not one.
  static absl::StatusOr<std::unique_ptr<SentencePieceLineEncoder>> Load(
      const std::string& model_path);
  const TokenizerInfo& info() const override { return tokenizer_->info(); }
  absl::Status EncodeLine(absl::string_view line, std::vector<uint32_t>* ids) const override;
  // Whether a line holds anything that may not survive encoding: invalid
  // UTF-8 (overlong forms and surrogates included), NUL or U+2581.
  static bool MayChangeInEncoding(absl::string_view line);
  // Whether lines are encoded one space segment at a time through a
  // per-thread cache (client/space_segments.h): true for every model whose
  // pieces allow it, which includes all that `data tokenizer train` makes.
  bool encodes_by_segment() const { return by_segment_; }

 private:
  explicit SentencePieceLineEncoder(std::unique_ptr<SentencePieceTokenizer> tokenizer);
  // The ids of `text` appended to *ids, straight from the library.
  absl::Status EncodeWhole(absl::string_view text, std::vector<uint32_t>* ids) const;
  absl::Status EncodeBySegment(absl::string_view line, std::vector<uint32_t>* ids) const;

  std::unique_ptr<SentencePieceTokenizer> tokenizer_;
  bool by_segment_ = false;
  uint64_t cache_owner_ = 0;  // tells this encoder's cached segments from another's
};

// Encodes the text files with the model at model_path, line by line (each
// line keeps its newline), and returns the number of tokens written.
// NOT_FOUND names an input or model that cannot be read; INVALID_ARGUMENT
// names the file and line of text that would not decode back to the same
// bytes (text that is not valid UTF-8), so a token file never silently
// differs from its text. One thread, one file: the reference that the
// parallel `data text` pipeline (client/text_command.h) is tested against.
absl::StatusOr<int64_t> BuildSentencePieceTokenFileFromText(
    const std::vector<std::string>& text_paths, const std::string& model_path,
    const std::string& out_path, TextDocuments documents = TextDocuments::kFiles);

}  // namespace tessera

#endif  // TESSERA_CLIENT_SENTENCEPIECE_TEXT_H_

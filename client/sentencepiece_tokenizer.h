// SentencePiece BPE tokenizers for `tessera data`: training a model file
// from text, and encoding text into token ids with one (and back, which the
// tests use to show that nothing is lost). The library itself sits behind
// sentencepiece_library.h; this is its absl::Status face.
//
// A model file is SentencePiece's own serialized model, so other tools
// (e.g. Python's sentencepiece) load it too. A token file made with one
// records the model's SHA-256 and vocabulary size (formats/token_file.h).
//
// Never link this into a program that links protobuf (the CLI, coordinator
// or worker): Debian's libsentencepiece exports its own protobuf-lite, and
// the two clash at load time. The CLI runs it in the tessera-sentencepiece
// helper process instead.
#ifndef TESSERA_CLIENT_SENTENCEPIECE_TOKENIZER_H_
#define TESSERA_CLIENT_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "formats/token_file.h"

namespace tessera {

namespace sentencepiece_library {
class Model;
}

// Smallest vocabulary a model can have: the 256 byte pieces and the
// <unk>, <s> and </s> pieces come first; the corpus's characters and BPE
// merges fill the rest.
inline constexpr int kMinSentencePieceVocab = 260;
// Largest: ids must fit a job's model.vocab_size (at most 2^20).
inline constexpr int kMaxSentencePieceVocab = 1 << 20;

// Trains a BPE model on the text files and writes it to out_path
// atomically. INVALID_ARGUMENT naming vocab_size when it is out of range or
// more than the corpus can fill (with the library's own limit in the
// message); NOT_FOUND naming an unreadable input.
absl::Status TrainBpeTokenizer(const std::vector<std::string>& corpus_paths, int vocab_size,
                               const std::string& out_path);

class SentencePieceTokenizer {
 public:
  // NOT_FOUND if the file cannot be read; INVALID_ARGUMENT if it is not a
  // SentencePiece model.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& model_path);
  ~SentencePieceTokenizer();

  // Kind, vocabulary size and the model file's SHA-256, for token files.
  const TokenizerInfo& info() const { return info_; }
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text) const;
  // Every piece of the vocabulary, by id (spaces spelled as U+2581).
  std::vector<std::string> Pieces() const;
  // INVALID_ARGUMENT for an id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const;

 private:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece_library::Model> model, TokenizerInfo info);
  std::unique_ptr<sentencepiece_library::Model> model_;
  TokenizerInfo info_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_SENTENCEPIECE_TOKENIZER_H_

// The one place that talks to the SentencePiece library (Debian's
// libsentencepiece-dev 0.1.97): BPE training and id encoding/decoding.
//
// This interface speaks only standard C++ types, and its .cc includes no
// Abseil header: SentencePiece 0.1.97's headers declare absl::string_view as
// an alias of std::string_view, while Debian's Abseil defines its own
// absl::string_view class, so one translation unit cannot see both. The
// rest of Tessera uses sentencepiece_tokenizer.h, which wraps this in
// absl::Status.
#ifndef TESSERA_CLIENT_SENTENCEPIECE_LIBRARY_H_
#define TESSERA_CLIENT_SENTENCEPIECE_LIBRARY_H_

#include <memory>
#include <string>
#include <vector>

namespace tessera {
namespace sentencepiece_library {

// Trains a byte-fallback BPE model on the text files (each line one
// sentence) and returns its serialized model in *model. The model keeps the
// text exactly as given (identity normalisation, whitespace kept, no dummy
// prefix) and falls back to byte pieces for anything unseen, so encoding
// valid UTF-8 and decoding it again gives the same bytes. Returns an error
// message, empty on success.
std::string TrainBpe(const std::vector<std::string>& inputs, int vocab_size, std::string* model);

class Model {
 public:
  // Loads a serialized model; returns null and sets *error on failure.
  static std::unique_ptr<Model> FromSerialized(const std::string& serialized, std::string* error);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  int vocab_size() const;
  // The piece of an id in [0, vocab_size()), spaces spelled as U+2581.
  std::string IdToPiece(int id) const;
  // Each returns an error message, empty on success.
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sentencepiece_library
}  // namespace tessera

#endif  // TESSERA_CLIENT_SENTENCEPIECE_LIBRARY_H_

// SentencePiece behind a plain C++ interface (see sentencepiece_library.h).
// No Abseil header may be included here.
#include "client/sentencepiece_library.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>

namespace tessera {
namespace sentencepiece_library {

std::string TrainBpe(const std::vector<std::string>& inputs, int vocab_size, std::string* model) {
  std::string input_list;
  for (const std::string& path : inputs) {
    if (path.find(',') != std::string::npos) {
      return "input " + path + ": the tokenizer trainer cannot take a path with a comma";
    }
    input_list += (input_list.empty() ? "" : ",") + path;
  }
  const std::unordered_map<std::string, std::string> options = {
      {"input", input_list},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      // Lossless: the text is kept byte for byte, and what the pieces do not
      // cover is spelled in byte pieces instead of becoming <unk>.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      // Long lines (code, minified text) still count as training sentences.
      {"max_sentence_length", "65536"},
      // One thread: the same corpus always gives the same model file.
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(options, nullptr, model);
  return status.ok() ? std::string() : std::string(status.message());
}

struct Model::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::FromSerialized(const std::string& serialized, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status status = impl->processor.LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.message();
    return nullptr;
  }
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

int Model::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::string Model::IdToPiece(int id) const { return impl_->processor.IdToPiece(id); }

std::string Model::Encode(const std::string& text, std::vector<int>* ids) const {
  const sentencepiece::util::Status status = impl_->processor.Encode(text, ids);
  return status.ok() ? std::string() : std::string(status.message());
}

std::string Model::Decode(const std::vector<int>& ids, std::string* text) const {
  const sentencepiece::util::Status status = impl_->processor.Decode(ids, text);
  return status.ok() ? std::string() : std::string(status.message());
}

}  // namespace sentencepiece_library
}  // namespace tessera

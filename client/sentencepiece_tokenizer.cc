// SentencePiece BPE training and encoding with absl::Status errors (see
// sentencepiece_tokenizer.h).
#include "client/sentencepiece_tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "client/sentencepiece_library.h"
#include "common/sha256.h"

namespace tessera {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading ", what, " ", path, " failed"));
  return bytes;
}

absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("out: cannot write ", path));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainBpeTokenizer(const std::vector<std::string>& corpus_paths, int vocab_size,
                               const std::string& out_path) {
  if (vocab_size < kMinSentencePieceVocab || vocab_size > kMaxSentencePieceVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size: must be in [", kMinSentencePieceVocab, ", ", kMaxSentencePieceVocab,
        "] (256 byte pieces and 3 special pieces come first), got ", vocab_size));
  }
  if (corpus_paths.empty()) return absl::InvalidArgumentError("corpus: give at least one text file");
  // The library reports a missing input only in its log: check first.
  for (const std::string& path : corpus_paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
  }
  std::string model;
  const std::string error = sentencepiece_library::TrainBpe(corpus_paths, vocab_size, &model);
  if (!error.empty()) {
    // Most failures are a vocabulary the corpus cannot fill (or too small
    // for its characters); the library's message says which and the limit.
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab_size, ": ", error));
  }
  return WriteAtomically(out_path, model);
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<sentencepiece_library::Model> model,
                                               TokenizerInfo info)
    : model_(std::move(model)), info_(std::move(info)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& model_path) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(model_path, "tokenizer model");
  if (!bytes.ok()) return bytes.status();
  std::string error;
  std::unique_ptr<sentencepiece_library::Model> model =
      sentencepiece_library::Model::FromSerialized(*bytes, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", model_path, ": not a SentencePiece model (", error, ")"));
  }
  if (model->vocab_size() < 1 || model->vocab_size() > kMaxSentencePieceVocab) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", model_path, ": vocabulary of ",
                                                   model->vocab_size(), " pieces is out of range"));
  }
  TokenizerInfo info;
  info.kind = TokenizerKind::kSentencePiece;
  info.vocab_size = static_cast<uint32_t>(model->vocab_size());
  info.model_sha256 = Sha256Hex(*bytes);
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(std::move(model), std::move(info)));
}

absl::StatusOr<std::vector<uint32_t>> SentencePieceTokenizer::Encode(absl::string_view text) const {
  std::vector<int> ids;
  const std::string error = model_->Encode(std::string(text), &ids);
  if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat("encoding failed: ", error));
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

std::vector<std::string> SentencePieceTokenizer::Pieces() const {
  std::vector<std::string> pieces(model_->vocab_size());
  for (int id = 0; id < model_->vocab_size(); ++id) pieces[id] = model_->IdToPiece(id);
  return pieces;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const uint32_t> ids) const {
  std::vector<int> signed_ids;
  signed_ids.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= info_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " lies outside the vocabulary of ", info_.vocab_size));
    }
    signed_ids.push_back(static_cast<int>(id));
  }
  std::string text;
  const std::string error = model_->Decode(signed_ids, &text);
  if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat("decoding failed: ", error));
  return text;
}

}  // namespace tessera

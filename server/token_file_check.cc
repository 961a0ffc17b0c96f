// Token file tokenizers against model.vocab_size and against each other
// (see token_file_check.h).
#include "server/token_file_check.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "formats/token_file.h"
#include "formats/token_shards.h"

namespace tessera {
namespace {

// The first file whose tokenizer is recorded, which every later one must match.
struct FirstTokenizer {
  std::string field;
  std::string path;
  TokenizerInfo tokenizer;
};

class TokenizerChecker {
 public:
  TokenizerChecker(int64_t vocab_size, bool document_masking)
      : vocab_size_(vocab_size), document_masking_(document_masking) {}

  // `field` names the spec field ("data.sources[2]"), `path` the file.
  // `same_tokenizer`: the file must match the first source file's
  // tokenizer (sources only; single token files keep their older rule).
  absl::Status CheckFile(const std::string& field, const std::string& path, bool same_tokenizer) {
    absl::StatusOr<TokenFileHeader> header = ReadTokenFileHeader(path);
    if (!header.ok()) return absl::OkStatus();  // the workers decide
    if (document_masking_ && !header->has_document_index) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.document_masking: ", field, " ", path, " records no document starts (token file "
          "version ", header->version, "; version 3 files from `tessera data text` have them), "
          "so its documents cannot be masked"));
    }
    if (!header->tokenizer.recorded()) return absl::OkStatus();
    const TokenizerInfo& tokenizer = header->tokenizer;
    if (vocab_size_ < static_cast<int64_t>(tokenizer.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.vocab_size: ", vocab_size_,
          " is smaller than the vocabulary of the tokenizer that made ", field, " ", path, ", ",
          tokenizer.ToString(), "; set model.vocab_size to at least ", tokenizer.vocab_size));
    }
    if (!same_tokenizer) return absl::OkStatus();
    if (!first_.has_value()) {
      first_ = FirstTokenizer{field, path, tokenizer};
      return absl::OkStatus();
    }
    const TokenizerInfo& want = first_->tokenizer;
    if (tokenizer.kind != want.kind || tokenizer.vocab_size != want.vocab_size ||
        tokenizer.model_sha256 != want.model_sha256) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", path, " was made by ", tokenizer.ToString(), ", but ", first_->field, " ",
          first_->path, " by ", want.ToString(),
          "; the same token id would mean different text, so every token file of a job must "
          "come from one tokenizer"));
    }
    return absl::OkStatus();
  }

  // Every file of a source. A path the coordinator cannot list is left to
  // the workers, which list it at setup and fail the job with the reason.
  absl::Status CheckSource(const std::string& field, const std::string& path) {
    absl::StatusOr<std::vector<std::string>> files = ListTokenShards(path);
    if (!files.ok()) return absl::OkStatus();
    for (const std::string& file : *files) RETURN_IF_ERROR(CheckFile(field, file, /*same_tokenizer=*/true));
    return absl::OkStatus();
  }

 private:
  int64_t vocab_size_;
  bool document_masking_;
  std::optional<FirstTokenizer> first_;
};

}  // namespace

absl::Status CheckTokenFilesFitVocab(const v1::JobSpec& spec) {
  TokenizerChecker checker(spec.model().vocab_size(), spec.data().document_masking());
  const v1::DataConfig& data = spec.data();
  if (data.source_case() == v1::DataConfig::kTokenFile && !data.token_file().empty()) {
    RETURN_IF_ERROR(checker.CheckFile("data.token_file", data.token_file(), /*same_tokenizer=*/false));
  }
  for (int i = 0; i < data.sources_size(); ++i) {
    RETURN_IF_ERROR(
        checker.CheckSource(absl::StrCat("data.sources[", i, "]"), data.sources(i).path()));
  }
  if (!data.has_validation()) return absl::OkStatus();
  if (!data.validation().token_file().empty()) {
    RETURN_IF_ERROR(
        checker.CheckFile("data.validation.token_file", data.validation().token_file(),
                          /*same_tokenizer=*/false));
  }
  for (int i = 0; i < data.validation().sources_size(); ++i) {
    RETURN_IF_ERROR(checker.CheckSource(absl::StrCat("data.validation.sources[", i, "]"),
                                        data.validation().sources(i).path()));
  }
  return absl::OkStatus();
}

}  // namespace tessera

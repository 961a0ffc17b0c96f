// Token file tokenizers against model.vocab_size (see token_file_check.h).
#include "server/token_file_check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "formats/token_file.h"

namespace tessera {
namespace {

absl::Status CheckOne(const std::string& field, const std::string& path, int64_t vocab_size) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<TokenFileHeader> header = ReadTokenFileHeader(path);
  if (!header.ok() || !header->tokenizer.recorded()) return absl::OkStatus();  // the workers decide
  const TokenizerInfo& tokenizer = header->tokenizer;
  if (vocab_size >= static_cast<int64_t>(tokenizer.vocab_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model.vocab_size: ", vocab_size, " is smaller than the vocabulary of the tokenizer that made ",
      field, " ", path, ", ", tokenizer.ToString(), "; set model.vocab_size to at least ",
      tokenizer.vocab_size));
}

}  // namespace

absl::Status CheckTokenFilesFitVocab(const v1::JobSpec& spec) {
  const int64_t vocab = spec.model().vocab_size();
  if (spec.data().source_case() == v1::DataConfig::kTokenFile) {
    RETURN_IF_ERROR(CheckOne("data.token_file", spec.data().token_file(), vocab));
  }
  if (spec.data().has_validation()) {
    return CheckOne("data.validation.token_file", spec.data().validation().token_file(), vocab);
  }
  return absl::OkStatus();
}

}  // namespace tessera

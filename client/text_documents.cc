// Document starts for `tessera data text` (see text_documents.h).
#include "client/text_documents.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<TextDocuments> ParseTextDocuments(absl::string_view value) {
  if (value == "files") return TextDocuments::kFiles;
  if (value == "blank-lines") return TextDocuments::kBlankLines;
  return absl::InvalidArgumentError(
      absl::StrCat("--documents must be files or blank-lines, got \"", value, "\""));
}

const char* TextDocumentsName(TextDocuments documents) {
  return documents == TextDocuments::kFiles ? "files" : "blank-lines";
}

void DocumentStartRecorder::AddLine(absl::string_view line, uint64_t tokens_so_far,
                                    uint64_t line_tokens) {
  const bool blank = absl::StripAsciiWhitespace(line).empty();
  if (documents_ == TextDocuments::kBlankLines) {
    // Blank lines before a file's first text stay with that text.
    if (blank) {
      after_blank_ = has_text_;
    } else {
      if (after_blank_) starts_document_ = true;
      after_blank_ = false;
      has_text_ = true;
    }
  }
  // A line without tokens (an empty file's) leaves the start pending.
  if (starts_document_ && line_tokens > 0) {
    starts_.push_back(tokens_so_far);
    starts_document_ = false;
  }
}

}  // namespace tessera

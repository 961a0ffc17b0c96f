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

bool IsBlankLine(absl::string_view line) { return absl::StripAsciiWhitespace(line).empty(); }

bool DocumentStartRecorder::LineBeginsDocument(bool blank, uint64_t line_tokens) {
  if (documents_ == TextDocuments::kBlankLines) {
    // Blank lines before a file's first text stay with that text.
    if (blank) {
      state_.after_blank = state_.has_text;
    } else {
      if (state_.after_blank) state_.starts_document = true;
      state_.after_blank = false;
      state_.has_text = true;
    }
  }
  // A line without tokens (an empty file's) leaves the start pending.
  if (state_.starts_document && line_tokens > 0) {
    state_.starts_document = false;
    return true;
  }
  return false;
}

}  // namespace tessera

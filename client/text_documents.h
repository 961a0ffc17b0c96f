// Where documents begin when `tessera data text` turns text into tokens:
// one document per input file (the default), or one per record of lines
// separated by blank lines. The token file records each document's first
// token (formats/token_file.h, version 3), which data.document_masking
// uses to keep attention and the loss inside documents.
#ifndef TESSERA_CLIENT_TEXT_DOCUMENTS_H_
#define TESSERA_CLIENT_TEXT_DOCUMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

enum class TextDocuments {
  kFiles,       // each input file is one document
  kBlankLines,  // a run of blank (empty or whitespace-only) lines ends a document
};

// "files" or "blank-lines"; INVALID_ARGUMENT naming --documents otherwise.
absl::StatusOr<TextDocuments> ParseTextDocuments(absl::string_view value);
const char* TextDocumentsName(TextDocuments documents);

// A line is blank when it is empty or holds only ASCII whitespace.
bool IsBlankLine(absl::string_view line);

// What decides whether the next line begins a document, between lines. A
// sharded `data text` output saves it with each shard, so that a resumed
// run continues inside a file exactly as an uninterrupted one would.
struct DocumentLineState {
  bool starts_document = true;  // the next token begins a document
  bool after_blank = false;     // the last line was blank, after text
  bool has_text = false;        // this file has had a non-blank line
};

// Collects document starts while text is tokenized line by line: call
// BeginFile() before each file's lines and AddLine() for each line (with
// its newline) before appending its tokens. A document starts at the first
// token of a file and, with kBlankLines, at the first token of a non-blank
// line that follows a blank one; blank lines belong to the document before
// them (at the top of a file, to the one after), so every token lies in a
// document and no document is empty or blank only.
class DocumentStartRecorder {
 public:
  explicit DocumentStartRecorder(TextDocuments documents) : documents_(documents) {}
  void BeginFile() { state_ = DocumentLineState(); }
  // `tokens_so_far`: tokens written before this line; `line_tokens`: how
  // many the line adds.
  void AddLine(absl::string_view line, uint64_t tokens_so_far, uint64_t line_tokens) {
    if (LineBeginsDocument(IsBlankLine(line), line_tokens)) starts_.push_back(tokens_so_far);
  }
  // The same decision for a line already known to be blank or not: whether
  // its first token begins a document (never for a line without tokens,
  // which leaves the start pending). For callers that keep their own starts.
  bool LineBeginsDocument(bool blank, uint64_t line_tokens);
  const std::vector<uint64_t>& starts() const { return starts_; }

  const DocumentLineState& state() const { return state_; }
  void Restore(const DocumentLineState& state) { state_ = state; }

 private:
  TextDocuments documents_;
  DocumentLineState state_;
  std::vector<uint64_t> starts_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_TEXT_DOCUMENTS_H_

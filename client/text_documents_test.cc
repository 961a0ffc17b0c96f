// Document starts of `tessera data text`: one per file by default, one per
// blank-line-separated record with blank-lines; blank lines stay with the
// document before them, and an empty file or line starts no empty document.
#include "client/text_documents.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Feeds files of lines (one token per byte) and returns the starts.
std::vector<uint64_t> StartsOf(TextDocuments documents,
                               const std::vector<std::vector<std::string>>& files) {
  DocumentStartRecorder recorder(documents);
  uint64_t tokens = 0;
  for (const std::vector<std::string>& lines : files) {
    recorder.BeginFile();
    for (const std::string& line : lines) {
      recorder.AddLine(line, tokens, line.size());
      tokens += line.size();
    }
  }
  return recorder.starts();
}

TEST(TextDocuments, ParsesTheTwoModesAndRefusesOthers) {
  EXPECT_EQ(*ParseTextDocuments("files"), TextDocuments::kFiles);
  EXPECT_EQ(*ParseTextDocuments("blank-lines"), TextDocuments::kBlankLines);
  const absl::StatusOr<TextDocuments> bad = ParseTextDocuments("lines");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--documents"), std::string::npos);
  EXPECT_STREQ(TextDocumentsName(TextDocuments::kBlankLines), "blank-lines");
}

TEST(TextDocuments, OneDocumentPerFileSkippingEmptyFiles) {
  // Files of 4, 0 and 6 bytes: documents at 0 and 4 (blank lines do not split).
  EXPECT_EQ(StartsOf(TextDocuments::kFiles, {{"ab\n", "\n"}, {}, {"cd\n", "\n", "ef\n"}}),
            (std::vector<uint64_t>{0, 4}));
}

TEST(TextDocuments, BlankLinesEndRecordsAndStayWithTheRecordBefore) {
  // "a\n" "\n" " \t\n" "b\n" "c\n" "\n" | next file: "\n" "d\n"
  //  0     2    3       6     8     10  |            11    12
  EXPECT_EQ(StartsOf(TextDocuments::kBlankLines,
                     {{"a\n", "\n", " \t\n", "b\n", "c\n", "\n"}, {"\n", "d\n"}}),
            (std::vector<uint64_t>{0, 6, 11}));
  // A last line without a newline, and a record that ends the file.
  EXPECT_EQ(StartsOf(TextDocuments::kBlankLines, {{"x\n", "\n", "y"}}),
            (std::vector<uint64_t>{0, 3}));
}

}  // namespace
}  // namespace tessera

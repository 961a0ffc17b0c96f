// MarkDocuments against a direct reading of its contract, on random
// documents (single-token documents and boundaries on the window's first,
// last and one-past-last token included): doc_starts is each input's
// document start relative to the window, clipped at 0, and exactly the
// targets whose token begins a document are ignored; and ReadSequence,
// which reads a window and marks it.
#include "worker/data/document_window.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/ignore_index.h"

namespace tessera {
namespace {

std::unique_ptr<TokenFile> FileWithDocuments(const std::string& name, int64_t tokens,
                                             const std::vector<uint64_t>& starts) {
  std::vector<uint32_t> ids(tokens);
  for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<uint32_t>(i % 1000);
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  EXPECT_TRUE(WriteTokenFile(path, ids, {}, absl::MakeConstSpan(starts)).ok());
  absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  return std::move(*file);
}

TEST(DocumentWindow, MatchesTheContractOnRandomDocuments) {
  std::mt19937 rng(std::random_device{}());
  const int64_t tokens = 500;
  std::vector<uint64_t> starts = {0};
  for (uint64_t i = 1; i < tokens; ++i) {
    if (rng() % 5 == 0) starts.push_back(i);
  }
  starts.push_back(starts.back() + 1 < tokens ? starts.back() + 1 : starts.back());  // maybe 1-token
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  const std::unique_ptr<TokenFile> file = FileWithDocuments("random.tok", tokens, starts);
  auto begins_document = [&](int64_t token) {
    return std::binary_search(starts.begin(), starts.end(), static_cast<uint64_t>(token));
  };
  for (int seq_len : {1, 2, 7, 64}) {
    for (int64_t offset = 0; offset + seq_len < tokens; ++offset) {
      std::vector<int32_t> targets(seq_len, 5), doc_starts(seq_len, -7);
      MarkDocuments(*file, offset, absl::MakeSpan(targets), absl::MakeSpan(doc_starts));
      for (int i = 0; i < seq_len; ++i) {
        const int64_t start = std::max<int64_t>(file->DocumentStartAt(offset + i) - offset, 0);
        ASSERT_EQ(doc_starts[i], start) << "offset " << offset << " i " << i;
        ASSERT_EQ(targets[i] == kIgnoreIndex, begins_document(offset + i + 1))
            << "offset " << offset << " i " << i;
        if (targets[i] != kIgnoreIndex) ASSERT_EQ(targets[i], 5);
      }
      ASSERT_EQ(doc_starts[0], 0);
      // Without doc_starts the targets come out the same.
      std::vector<int32_t> again(seq_len, 5);
      MarkDocuments(*file, offset, absl::MakeSpan(again), {});
      ASSERT_EQ(again, targets);
    }
  }
}

TEST(DocumentWindow, AWorkedExample) {
  // Documents [0, 3), [3, 4), [4, 10): the window of 6 inputs at token 2.
  const std::unique_ptr<TokenFile> file = FileWithDocuments("example.tok", 10, {0, 3, 4});
  std::vector<int32_t> targets(6, 1), doc_starts(6, -1);
  MarkDocuments(*file, 2, absl::MakeSpan(targets), absl::MakeSpan(doc_starts));
  // Inputs are tokens 2..7: token 2 is in [0, 3), 3 alone, 4..7 in [4, 10).
  EXPECT_EQ(doc_starts, (std::vector<int32_t>{0, 1, 2, 2, 2, 2}));
  // Targets are tokens 3..8: tokens 3 and 4 begin documents.
  EXPECT_EQ(targets, (std::vector<int32_t>{kIgnoreIndex, kIgnoreIndex, 1, 1, 1, 1}));
}

TEST(DocumentWindow, ReadSequenceReadsTheWindowAndMarksOnlyUnderMasking) {
  // The same file as above; token i holds i % 1000.
  const std::unique_ptr<TokenFile> file = FileWithDocuments("read.tok", 10, {0, 3, 4});
  std::vector<int32_t> inputs(6), targets(6), doc_starts(6, -1);
  ReadSequence(*file, 2, /*document_masking=*/true, absl::MakeSpan(inputs),
               absl::MakeSpan(targets), absl::MakeSpan(doc_starts));
  EXPECT_EQ(inputs, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(targets, (std::vector<int32_t>{kIgnoreIndex, kIgnoreIndex, 5, 6, 7, 8}));
  EXPECT_EQ(doc_starts, (std::vector<int32_t>{0, 1, 2, 2, 2, 2}));
  // Without masking: the plain next tokens, and one document.
  std::fill(doc_starts.begin(), doc_starts.end(), -1);
  ReadSequence(*file, 2, /*document_masking=*/false, absl::MakeSpan(inputs),
               absl::MakeSpan(targets), absl::MakeSpan(doc_starts));
  EXPECT_EQ(targets, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(doc_starts, (std::vector<int32_t>(6, 0)));
  // Without doc_starts (not wanted) the targets are marked all the same.
  ReadSequence(*file, 2, /*document_masking=*/true, absl::MakeSpan(inputs),
               absl::MakeSpan(targets), {});
  EXPECT_EQ(targets, (std::vector<int32_t>{kIgnoreIndex, kIgnoreIndex, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace tessera

// Space segments: where lines are cut, which models allow it, the cache's
// bounds, and (the point of it all) that a trained model's ids for a line
// are the same encoded whole or one segment at a time, cached or not, for
// prose and for odd spacing: runs of spaces, leading and trailing spaces,
// tabs, digits and text the model never saw.
#include "client/space_segments.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/sentencepiece_text.h"
#include "client/sentencepiece_tokenizer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::vector<std::string> SegmentsOf(absl::string_view line) {
  std::vector<std::string> segments;
  ForEachSpaceSegment(line, [&](absl::string_view s) { segments.emplace_back(s); });
  return segments;
}

TEST(SpaceSegments, CutBeforeEverySpace) {
  EXPECT_EQ(SegmentsOf("a b  c\n"), (std::vector<std::string>{"a", " b", " ", " c\n"}));
  EXPECT_EQ(SegmentsOf(" x"), (std::vector<std::string>{" x"}));
  EXPECT_EQ(SegmentsOf("   "), (std::vector<std::string>{" ", " ", " "}));
  EXPECT_EQ(SegmentsOf("tab\there\n"), (std::vector<std::string>{"tab\there\n"}));
  EXPECT_TRUE(SegmentsOf("").empty());
}

TEST(SpaceSegments, OnlyModelsWithoutInnerSpaceMarksQualify) {
  EXPECT_TRUE(PiecesStayWithinSpaceSegments({"<unk>", "\xe2\x96\x81", "\xe2\x96\x81the", "ing"}));
  EXPECT_FALSE(PiecesStayWithinSpaceSegments({"a", "of\xe2\x96\x81the"}));
  EXPECT_FALSE(PiecesStayWithinSpaceSegments({"\xe2\x96\x81\xe2\x96\x81"}));
  EXPECT_FALSE(PiecesStayWithinSpaceSegments({"end\xe2\x96\x81"}));
}

TEST(SpaceSegments, CacheKeepsShortSegmentsAndResets) {
  SegmentIdCache cache;
  cache.Reset(7);
  std::vector<uint32_t> ids = {9, 1, 2};
  cache.Keep(" ab", ids, 1);  // the ids from index 1 on are the segment's
  std::vector<uint32_t> out = {5};
  ASSERT_TRUE(cache.Append(" ab", &out));
  EXPECT_EQ(out, (std::vector<uint32_t>{5, 1, 2}));
  EXPECT_FALSE(cache.Append(" a", &out));
  const std::string long_segment(SegmentIdCache::kMaxSegmentBytes + 1, 'x');
  cache.Keep(long_segment, ids, 0);
  EXPECT_FALSE(cache.Append(long_segment, &out));
  cache.Reset(8);
  EXPECT_EQ(cache.owner(), 8u);
  EXPECT_FALSE(cache.Append(" ab", &out));
}

TEST(SpaceSegments, SegmentIdsEqualWholeLineIdsForATrainedModel) {
  const std::string model = absl::StrCat(std::getenv("TEST_TMPDIR"), "/bpe.model");
  ASSERT_TRUE(TrainBpeTokenizer({"client/testdata/tokenizer_corpus.txt"}, 600, model).ok());
  auto whole = SentencePieceTokenizer::Load(model);
  auto encoder = SentencePieceLineEncoder::Load(model);
  ASSERT_TRUE(whole.ok() && encoder.ok());
  ASSERT_TRUE((*encoder)->encodes_by_segment());

  std::ifstream in("client/testdata/tokenizer_corpus.txt", std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line + "\n");
  std::mt19937 rng(std::random_device{}());
  const std::string odd[] = {" ", "  ", "   ", "\t", " \t ", "0", "42 ", "zq", "\xc3\xa9", ""};
  for (int i = 0; i < 3000; ++i) {
    std::string line = lines[rng() % lines.size()];
    if (i % 2 == 1) {  // odd spacing and unseen text spliced in at random places
      for (int k = rng() % 4; k >= 0; --k) {
        size_t at = rng() % line.size();
        while (at > 0 && (static_cast<unsigned char>(line[at]) & 0xc0) == 0x80) --at;
        line.insert(at, odd[rng() % (sizeof(odd) / sizeof(odd[0]))]);  // between characters
      }
    }
    auto want = (*whole)->Encode(line);
    ASSERT_TRUE(want.ok());
    for (int pass = 0; pass < 2; ++pass) {  // a miss, then a hit
      std::vector<uint32_t> got;
      ASSERT_TRUE((*encoder)->EncodeLine(line, &got).ok()) << line;
      ASSERT_EQ(got, *want) << "pass " << pass << ": \"" << line << "\"";
    }
  }
}

}  // namespace
}  // namespace tessera

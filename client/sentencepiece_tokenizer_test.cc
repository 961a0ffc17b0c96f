// SentencePiece BPE: a model trained on the prose shipped in testdata/
// encodes that text and text it never saw (other scripts, emoji, control
// characters, runs of spaces) and decodes both back byte for byte; training
// is deterministic; a token file made with the model names it in its header;
// bad vocabularies, inputs and non-UTF-8 text are refused with the reason.
#include "client/sentencepiece_tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "client/sentencepiece_text.h"
#include "common/sha256.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr char kCorpus[] = "client/testdata/tokenizer_corpus.txt";
constexpr int kVocab = 400;

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string WriteRaw(const std::string& name, const std::string& content) {
  std::ofstream(TempPath(name), std::ios::binary) << content;
  return TempPath(name);
}

// Text none of which is in the corpus: accents, CJK, emoji, tabs, CR LF,
// runs of spaces, a control character, digits and no final newline.
const char kUnseen[] =
    "Zw\xc3\xb6lf Boxk\xc3\xa4mpfer jagen Viktor quer \xc3\xbc" "ber den Sylter Deich.\n"
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82  two  spaces\tand a tab\r\n"
    "\n\x01 control 0123456789 {braces} [brackets] <angles> ~tilde~";

class SentencePieceTokenizerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(TempPath("tok.model"));
    ASSERT_TRUE(TrainBpeTokenizer({kCorpus}, kVocab, *model_).ok());
  }
  static void TearDownTestSuite() { delete model_; }
  static std::string* model_;
};
std::string* SentencePieceTokenizerTest::model_ = nullptr;

TEST_F(SentencePieceTokenizerTest, ModelRecordsItsVocabularyAndHash) {
  auto tokenizer = SentencePieceTokenizer::Load(*model_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const TokenizerInfo& info = (*tokenizer)->info();
  EXPECT_EQ(info.kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(info.vocab_size, static_cast<uint32_t>(kVocab));
  EXPECT_EQ(info.model_sha256, Sha256Hex(ReadAll(*model_)));
}

TEST_F(SentencePieceTokenizerTest, TrainingIsDeterministic) {
  const std::string again = TempPath("again.model");
  ASSERT_TRUE(TrainBpeTokenizer({kCorpus}, kVocab, again).ok());
  EXPECT_EQ(ReadAll(again), ReadAll(*model_));
}

TEST_F(SentencePieceTokenizerTest, EncodingThenDecodingIsLossless) {
  auto tokenizer = SentencePieceTokenizer::Load(*model_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string corpus = ReadAll(kCorpus);
  ASSERT_GT(corpus.size(), 4000u);
  for (const std::string& text : {corpus, std::string(kUnseen)}) {
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (uint32_t id : *ids) ASSERT_LT(id, static_cast<uint32_t>(kVocab));
    auto back = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
  // BPE merges make the text it was trained on shorter than its bytes.
  auto ids = (*tokenizer)->Encode(corpus);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), corpus.size() * 3 / 4);
  EXPECT_EQ((*tokenizer)->Decode(std::vector<uint32_t>{kVocab}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SentencePieceTokenizerTest, TokenFileNamesTheTokenizerAndDecodesToItsText) {
  const std::string unseen = WriteRaw("unseen.txt", kUnseen);
  const std::string out = TempPath("bpe.tok");
  absl::StatusOr<int64_t> written = BuildSentencePieceTokenFileFromText({kCorpus, unseen}, *model_, out);
  ASSERT_TRUE(written.ok()) << written.status();

  auto header = ReadTokenFileHeader(out);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->version, kTokenFileVersion);
  EXPECT_EQ(header->tokenizer.kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(header->tokenizer.vocab_size, static_cast<uint32_t>(kVocab));
  EXPECT_EQ(header->tokenizer.model_sha256, Sha256Hex(ReadAll(*model_)));
  EXPECT_EQ(header->count, static_cast<uint64_t>(*written));

  auto file = TokenFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tokenizer().model_sha256, header->tokenizer.model_sha256);
  std::vector<uint32_t> ids((*file)->size());
  for (int64_t i = 0; i < (*file)->size(); ++i) ids[i] = (*file)->Token(i);
  auto tokenizer = SentencePieceTokenizer::Load(*model_);
  ASSERT_TRUE(tokenizer.ok());
  auto text = (*tokenizer)->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, ReadAll(kCorpus) + kUnseen);
}

TEST_F(SentencePieceTokenizerTest, TextThatCannotRoundTripIsRefusedNamingTheLine) {
  const std::string bad = WriteRaw("latin1.txt", "fine line\nna\xefve caf\xe9\n");
  absl::StatusOr<int64_t> written =
      BuildSentencePieceTokenFileFromText({bad}, *model_, TempPath("bad.tok"));
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(written.status().message().find(absl::StrCat(bad, ":2:")), std::string::npos)
      << written.status();
  EXPECT_EQ(BuildSentencePieceTokenFileFromText({TempPath("none.txt")}, *model_, TempPath("n.tok"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(SentencePieceTraining, BadRequestsAreRefusedWithTheReason) {
  absl::Status s = TrainBpeTokenizer({kCorpus}, 100, TempPath("small.model"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocab_size"), std::string::npos) << s;
  // More pieces than this corpus can fill: the library's limit is named.
  s = TrainBpeTokenizer({kCorpus}, 50000, TempPath("large.model"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocab_size 50000"), std::string::npos) << s;
  const std::string missing = TempPath("missing.txt");
  s = TrainBpeTokenizer({kCorpus, missing}, kVocab, TempPath("m.model"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;

  EXPECT_EQ(SentencePieceTokenizer::Load(TempPath("nothing.model")).status().code(),
            absl::StatusCode::kNotFound);
  auto junk = SentencePieceTokenizer::Load(WriteRaw("junk.model", "not a model at all"));
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument) << junk.status();
}

}  // namespace
}  // namespace tessera

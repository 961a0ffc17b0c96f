// `tessera data`: text files become byte tokens, synthetic tasks become token
// files of the requested size, `tokenizer train` makes a BPE model that
// `text --tokenizer` then encodes with (the token file names it), and bad
// arguments are usage errors.
#include "client/data_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "formats/token_file.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

int RunData(const std::vector<std::string>& argv, std::string* err = nullptr,
            std::string* out_text = nullptr) {
  absl::StatusOr<ParsedArgs> args = ParseArgs(argv);
  EXPECT_TRUE(args.ok()) << args.status();
  std::ostringstream out, errs;
  int code = RunDataCommand(*args, out, errs);
  if (err != nullptr) *err = errs.str();
  if (out_text != nullptr) *out_text = out.str();
  return code;
}

TEST(DataCommand, TextBecomesByteTokens) {
  std::mt19937 rng(std::random_device{}());
  std::string a, b;
  for (int i = 0; i < 300; ++i) a.push_back(static_cast<char>(rng() % 256));
  for (int i = 0; i < 77; ++i) b.push_back(static_cast<char>('a' + rng() % 26));
  std::ofstream(TempPath("a.txt"), std::ios::binary) << a;
  std::ofstream(TempPath("b.txt"), std::ios::binary) << b;
  ASSERT_EQ(RunData({"data", "text", "--out", TempPath("t.tok"), TempPath("a.txt"), TempPath("b.txt")}),
            kExitOk);
  auto file = TokenFile::Open(TempPath("t.tok"));
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string all = a + b;
  ASSERT_EQ((*file)->size(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ((*file)->Token(i), static_cast<unsigned char>(all[i])) << i;
  }
}

TEST(DataCommand, TextRecordsDocumentsPerFileOrPerBlankLineRecord) {
  std::ofstream(TempPath("d1.txt"), std::ios::binary) << "one\n\ntwo\n";
  std::ofstream(TempPath("d2.txt"), std::ios::binary) << "three";
  const std::string files = TempPath("files.tok"), records = TempPath("records.tok");
  ASSERT_EQ(RunData({"data", "text", "--out", files, TempPath("d1.txt"), TempPath("d2.txt")}),
            kExitOk);
  ASSERT_EQ(RunData({"data", "text", "--documents", "blank-lines", "--out", records,
                     TempPath("d1.txt"), TempPath("d2.txt")}),
            kExitOk);
  auto by_file = TokenFile::Open(files);
  auto by_record = TokenFile::Open(records);
  ASSERT_TRUE(by_file.ok() && by_record.ok());
  EXPECT_EQ(std::vector<uint64_t>((*by_file)->document_starts().begin(),
                                  (*by_file)->document_starts().end()),
            (std::vector<uint64_t>{0, 9}));
  EXPECT_EQ(std::vector<uint64_t>((*by_record)->document_starts().begin(),
                                  (*by_record)->document_starts().end()),
            (std::vector<uint64_t>{0, 5, 9}));
  std::string err;
  EXPECT_EQ(RunData({"data", "text", "--documents", "paragraphs", "--out", records,
                     TempPath("d1.txt")},
                    &err),
            kExitUsage);
  EXPECT_NE(err.find("--documents must be files or blank-lines"), std::string::npos) << err;
  // Each mode's document flag is refused by the other, by name.
  err.clear();
  EXPECT_EQ(RunData({"data", "text", "--mean-document-tokens", "64", "--out", records,
                     TempPath("d1.txt")},
                    &err),
            kExitUsage);
  EXPECT_NE(err.find("--mean-document-tokens is not a flag of data text"), std::string::npos)
      << err;
  err.clear();
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "100", "--documents",
                     "blank-lines", "--out", records},
                    &err),
            kExitUsage);
  EXPECT_NE(err.find("--documents is a flag of data text"), std::string::npos) << err;
}

TEST(DataCommand, SyntheticRecordsDocumentsOfTheRequestedMeanLength) {
  const std::string out = TempPath("docs.tok");
  ASSERT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "200000", "--seed", "3",
                     "--mean-document-tokens", "256", "--out", out}),
            kExitOk);
  auto file = TokenFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->has_document_index());
  const double mean = 200000.0 / (*file)->document_starts().size();
  EXPECT_NEAR(mean, 256.0, 256.0 * 0.05);  // about 780 documents: well within 5%
  // The tokens do not depend on the documents.
  ASSERT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "200000", "--seed", "3",
                     "--out", TempPath("nodocs.tok")}),
            kExitOk);
  auto plain = TokenFile::Open(TempPath("nodocs.tok"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->has_document_index());
  for (int64_t i = 0; i < 200000; i += 997) EXPECT_EQ((*plain)->Token(i), (*file)->Token(i));
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "100",
                     "--mean-document-tokens", "0", "--out", out}),
            kExitUsage);
}

TEST(DataCommand, SyntheticWritesTheRequestedTokens) {
  const int64_t tokens = 1000 + std::random_device{}() % 5000;
  for (const char* task : {"addition", "COPY"}) {
    const std::string out = TempPath(std::string(task) + ".tok");
    ASSERT_EQ(RunData({"data", "synthetic", "--task", task, "--tokens", std::to_string(tokens),
                   "--seed", "17", "--out", out}),
              kExitOk)
        << task;
    auto file = TokenFile::Open(out);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->size(), tokens);
    EXPECT_LT((*file)->max_token(), 256u);
  }
}

TEST(DataCommand, TrainsATokenizerAndEncodesTextWithIt) {
  const std::string corpus = "client/testdata/tokenizer_corpus.txt";
  const std::string model = TempPath("tok.model");
  std::string out, err;
  ASSERT_EQ(RunData({"data", "tokenizer", "train", "--vocab_size", "400", "--out", model, corpus},
                    &err, &out),
            kExitOk)
      << err;
  EXPECT_NE(out.find("sentencepiece (vocab 400"), std::string::npos) << out;
  const std::string tokens = TempPath("bpe.tok");
  ASSERT_EQ(RunData({"data", "text", "--tokenizer", model, "--out", tokens, corpus}, &err, &out),
            kExitOk)
      << err;
  auto file = TokenFile::Open(tokens);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tokenizer().kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ((*file)->tokenizer().vocab_size, 400u);
  EXPECT_EQ((*file)->tokenizer().model_sha256.size(), 64u);
  EXPECT_LT((*file)->max_token(), 400u);
  // The helper records documents too: one per file by default, more with
  // blank-lines (the corpus has blank-line-separated paragraphs or not;
  // either way the index starts at 0).
  EXPECT_EQ((*file)->document_starts().size(), 1u);
  ASSERT_EQ(RunData({"data", "text", "--tokenizer", model, "--documents", "blank-lines", "--out",
                     TempPath("records.tok"), corpus, corpus},
                    &err, &out),
            kExitOk)
      << err;
  auto records = TokenFile::Open(TempPath("records.tok"));
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_GE((*records)->document_starts().size(), 2u);
  EXPECT_EQ((*records)->document_starts()[0], 0u);
  // Byte-level stays the default, and says so.
  ASSERT_EQ(RunData({"data", "text", "--out", TempPath("bytes.tok"), corpus}), kExitOk);
  auto bytes = TokenFile::Open(TempPath("bytes.tok"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((*bytes)->tokenizer().kind, TokenizerKind::kByte);

  EXPECT_EQ(RunData({"data", "tokenizer", "train", "--vocab_size", "12", "--out", model, corpus},
                    &err),
            kExitUsage);
  EXPECT_NE(err.find("--vocab_size"), std::string::npos) << err;
  EXPECT_EQ(RunData({"data", "tokenizer", "train", "--out", model, corpus}), kExitUsage);
  EXPECT_EQ(RunData({"data", "tokenizer", "apply", "--vocab_size", "400", "--out", model, corpus}),
            kExitUsage);
  EXPECT_EQ(RunData({"data", "tokenizer", "train", "--vocab_size", "400", "--out", model}),
            kExitUsage);
  EXPECT_EQ(RunData({"data", "text", "--tokenizer", TempPath("none.model"), "--out", tokens, corpus},
                    &err),
            kExitFailed);
  EXPECT_NE(err.find("none.model"), std::string::npos) << err;
}

// Through the helper: a shard directory, the same ids on 1 thread as on 3,
// and a second run into the same directory refused with what to do.
TEST(DataCommand, EncodesIntoShardsWithTheHelperOnAnyThreadCount) {
  const std::string corpus = "client/testdata/tokenizer_corpus.txt";
  const std::string model = TempPath("shards.model");
  std::string out, err;
  ASSERT_EQ(RunData({"data", "tokenizer", "train", "--vocab_size", "420", "--out", model, corpus},
                    &err),
            kExitOk)
      << err;
  ASSERT_EQ(RunData({"data", "text", "--tokenizer", model, "--threads", "1", "--out",
                     TempPath("one.tok"), corpus},
                    &err),
            kExitOk)
      << err;
  ASSERT_EQ(RunData({"data", "text", "--tokenizer", model, "--threads=3", "--shard-tokens",
                     "400", "--out", TempPath("shards"), corpus},
                    &err, &out),
            kExitOk)
      << err;
  EXPECT_NE(out.find("shards"), std::string::npos) << out;
  EXPECT_NE(out.find("3 threads"), std::string::npos) << out;
  auto one = TokenFile::Open(TempPath("one.tok"));
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<uint32_t> sharded;
  for (int i = 0;; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "shards/shard-%06d.tok", i);
    auto shard = TokenFile::Open(TempPath(name));
    if (!shard.ok()) break;
    for (int64_t j = 0; j < (*shard)->size(); ++j) sharded.push_back((*shard)->Token(j));
  }
  ASSERT_EQ(static_cast<int64_t>(sharded.size()), (*one)->size());
  for (size_t i = 0; i < sharded.size(); ++i) ASSERT_EQ(sharded[i], (*one)->Token(i)) << i;
  EXPECT_EQ(RunData({"data", "text", "--tokenizer", model, "--shard-tokens", "400", "--out",
                     TempPath("shards"), corpus}),
            kExitFailed);
  EXPECT_EQ(RunData({"data", "text", "--tokenizer", model, "--shard-tokens", "400", "--resume",
                     "--out", TempPath("shards"), corpus},
                    &err, &out),
            kExitOk)
      << err;
  EXPECT_NE(out.find("already complete"), std::string::npos) << out;
}

TEST(DataCommand, BadArgumentsAreUsageErrors) {
  std::string err;
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "sorting", "--tokens", "10", "--out", "x"}, &err),
            kExitUsage);
  EXPECT_NE(err.find("--task"), std::string::npos) << err;
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "-5", "--out", "x"}), kExitUsage);
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "10"}), kExitUsage);
  // Beyond what is generated in memory: refused, not allocated.
  EXPECT_EQ(RunData({"data", "synthetic", "--task", "copy", "--tokens", "1000000000000", "--out",
                     TempPath("huge.tok")},
                    &err),
            kExitUsage);
  EXPECT_NE(err.find("--tokens must be at most"), std::string::npos) << err;
  EXPECT_EQ(RunData({"data", "text", "--out", "x"}), kExitUsage);
  EXPECT_EQ(RunData({"data", "zip", "--out", "x"}), kExitUsage);
  EXPECT_EQ(RunData({"data", "text", "--out", TempPath("n.tok"), "/nonexistent.txt"}, &err),
            kExitFailed);
  EXPECT_NE(err.find("/nonexistent.txt: no such file"), std::string::npos) << err;
  EXPECT_EQ(RunData({"data", "text", "--out", TempPath("n.tok"), "--threads", "zero", "x"}, &err),
            kExitUsage);
  EXPECT_NE(err.find("--threads"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera

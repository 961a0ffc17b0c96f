// Documents in `tessera data text` output: every file written carries the
// document index, byte for byte the same on any thread count and chunk size
// and the same as the one-thread reference encoder; a blank-line record
// never runs from one input into the next; shards begin at document starts
// (or at the split rest of a document that alone filled a shard); and a run
// interrupted after any shard resumes to the very same files, document
// state included. Flags that do not belong together are refused by name.
#include "client/token_output.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/cli_args.h"
#include "client/sentencepiece_text.h"
#include "client/sentencepiece_tokenizer.h"
#include "client/text_command.h"
#include "client/text_command_test_util.h"
#include "formats/token_file.h"
#include "formats/token_shards.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using testing::kTokenizerCorpus;
using testing::LoadTrainedBpeModel;
using testing::NewTestDir;
using testing::ReadFileBytes;
using testing::RunTextCommandQuietly;
using testing::TrainedBpeModelPath;

// Inputs of records: runs of prose lines separated by one to three blank
// lines (some of spaces and tabs). Files may open with blank lines, end
// with one or without a newline; one is empty.
std::vector<std::string> MakeRecordCorpus(std::mt19937* rng) {
  std::vector<std::string> prose;
  std::istringstream corpus(ReadFileBytes(kTokenizerCorpus));
  for (std::string line; std::getline(corpus, line);) {
    if (!line.empty()) prose.push_back(line);
  }
  auto records = [&](int n) {
    std::string t;
    for (int r = 0; r < n; ++r) {
      for (int i = 1 + (*rng)() % 12; i > 0; --i) {
        t += prose[(*rng)() % prose.size()].substr(0, 1 + (*rng)() % 150) + "\n";
      }
      for (int b = 1 + (*rng)() % 3; b > 0; --b) t += (*rng)() % 3 == 0 ? " \t\n" : "\n";
    }
    return t;
  };
  const std::string dir = NewTestDir("docs");
  std::vector<std::string> paths;
  auto add = [&](const std::string& name, const std::string& text) {
    paths.push_back(dir + "/" + name);
    std::ofstream(paths.back(), std::ios::binary) << text;
  };
  add("a.txt", records(8));
  add("b.txt", "\n \n" + records(6));  // opens with blank lines
  add("c.txt", "");
  std::string d = records(5);
  d.erase(d.find_last_not_of(" \t\n") + 1);  // ends inside a record, no newline
  add("d.txt", d);
  add("e.txt", records(4));
  return paths;
}

std::vector<uint64_t> StartsOf(const std::string& path) {
  auto file = TokenFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  EXPECT_TRUE((*file)->has_document_index());
  return std::vector<uint64_t>((*file)->document_starts().begin(),
                               (*file)->document_starts().end());
}

// Every file of a shard directory (shards and manifest), by name.
std::map<std::string, std::string> FilesOf(const std::string& dir) {
  std::map<std::string, std::string> files;
  auto shards = ListTokenShards(dir);
  EXPECT_TRUE(shards.ok()) << shards.status();
  for (const std::string& shard : shards.ok() ? *shards : std::vector<std::string>{}) {
    files[shard.substr(dir.size())] = ReadFileBytes(shard);
  }
  files[kShardManifestName] = ReadFileBytes(absl::StrCat(dir, "/", kShardManifestName));
  return files;
}

TextCommandOptions Options(const std::vector<std::string>& inputs, const std::string& out,
                           TextDocuments documents, int64_t shard_tokens) {
  TextCommandOptions options;
  options.input_names = inputs;
  options.threads = 1;
  options.output.path = out;
  options.output.documents = documents;
  options.output.directory = shard_tokens > 0;
  if (shard_tokens > 0) options.output.shard_tokens = shard_tokens;
  return options;
}

class TokenOutputDocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sentencepiece_ = LoadTrainedBpeModel();
    ASSERT_NE(sentencepiece_, nullptr);
  }
  std::vector<const LineEncoder*> Encoders() const { return {sentencepiece_.get(), &bytes_}; }

  std::unique_ptr<SentencePieceLineEncoder> sentencepiece_;
  ByteLineEncoder bytes_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(TokenOutputDocumentsTest, SameBytesOnEveryThreadCountAndAsTheReferenceEncoder) {
  const std::vector<std::string> inputs = MakeRecordCorpus(&rng_);
  for (TextDocuments documents : {TextDocuments::kFiles, TextDocuments::kBlankLines}) {
    // The one-thread, one-line-at-a-time encoder with the same documents.
    const std::string reference = NewTestDir("docs") + "/reference.tok";
    ASSERT_TRUE(
        BuildSentencePieceTokenFileFromText(inputs, TrainedBpeModelPath(), reference, documents).ok());
    for (const LineEncoder* encoder : Encoders()) {
      SCOPED_TRACE(absl::StrCat(TextDocumentsName(documents), " ", encoder->info().ToString()));
      const std::string one_file = NewTestDir("docs") + "/one.tok", one_dir = NewTestDir("docs") + "/one";
      ASSERT_TRUE(RunTextCommandQuietly(Options(inputs, one_file, documents, 0), *encoder).ok());
      ASSERT_TRUE(RunTextCommandQuietly(Options(inputs, one_dir, documents, 900), *encoder).ok());
      if (encoder == sentencepiece_.get()) {
        EXPECT_TRUE(ReadFileBytes(one_file) == ReadFileBytes(reference));
      }
      const std::vector<uint64_t> starts = StartsOf(one_file);
      EXPECT_GT(starts.size(), documents == TextDocuments::kFiles ? 3u : 15u);
      for (int threads : {2, 8}) {
        for (int64_t chunk_bytes : {1, 333, 1 << 20}) {
          TextCommandOptions file = Options(inputs, NewTestDir("docs") + "/n.tok", documents, 0);
          TextCommandOptions dir = Options(inputs, NewTestDir("docs") + "/n", documents, 900);
          file.threads = dir.threads = threads;
          file.chunk_bytes = dir.chunk_bytes = chunk_bytes;
          ASSERT_TRUE(RunTextCommandQuietly(file, *encoder).ok());
          ASSERT_TRUE(RunTextCommandQuietly(dir, *encoder).ok());
          EXPECT_TRUE(ReadFileBytes(file.output.path) == ReadFileBytes(one_file))
              << threads << " threads, chunks of " << chunk_bytes;
          EXPECT_TRUE(FilesOf(dir.output.path) == FilesOf(one_dir))
              << threads << " threads, chunks of " << chunk_bytes;
        }
      }
    }
  }
}

// Byte-level, so token positions are byte positions and the expected
// starts can be read off the text.
TEST_F(TokenOutputDocumentsTest, BlankLineRecordsEndAtEveryInput) {
  const std::string dir = NewTestDir("docs");
  const std::vector<std::string> texts = {
      "one\n",            // ends inside a record: the next file still begins a new one
      "\n\ntwo\n\n",      // opens with blank lines (they stay with "two"), ends with one
      "",                 // empty: no document
      " \nthree\n\nfour"  // a whitespace line opens it; no final newline
  };
  std::vector<std::string> inputs;
  for (size_t i = 0; i < texts.size(); ++i) {
    inputs.push_back(absl::StrCat(dir, "/", i, ".txt"));
    std::ofstream(inputs.back(), std::ios::binary) << texts[i];
  }
  // 0 "one\n" | 4 "\n\ntwo\n\n" | 11 " \nthree\n\n" 20 "four"
  const std::vector<uint64_t> want = {0, 4, 11, 20};
  for (int64_t chunk_bytes : {1, 2, 5, 1 << 20}) {
    for (int threads : {1, 3}) {
      TextCommandOptions options =
          Options(inputs, NewTestDir("docs") + "/all.tok", TextDocuments::kBlankLines, 0);
      options.threads = threads;
      options.chunk_bytes = chunk_bytes;
      ASSERT_TRUE(RunTextCommandQuietly(options, bytes_).ok());
      EXPECT_EQ(StartsOf(options.output.path), want) << chunk_bytes << " " << threads;
    }
  }
  // In shards of 3 tokens: a shard closes before the first document start
  // once full, or splits a document that alone fills it ("two"'s and
  // "three"'s records here, each before its blank line).
  const std::string shards = NewTestDir("docs") + "/shards";
  ASSERT_TRUE(RunTextCommandQuietly(Options(inputs, shards, TextDocuments::kBlankLines, 3), bytes_).ok());
  auto paths = ListTokenShards(shards);
  ASSERT_TRUE(paths.ok());
  std::vector<int64_t> sizes;
  std::vector<std::vector<uint64_t>> starts;
  for (const std::string& path : *paths) {
    auto file = TokenFile::Open(path);
    ASSERT_TRUE(file.ok());
    sizes.push_back((*file)->size());
    starts.push_back(StartsOf(path));
  }
  // "one\n" | "\n\ntwo\n" | "\n" " \nthree\n" | "\n" "four"
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 6, 9, 5}));
  EXPECT_EQ(starts, (std::vector<std::vector<uint64_t>>{{0}, {0}, {0, 1}, {0, 1}}));
}

// A shard boundary falls only where a document begins, unless one document
// alone has filled the shard: then it is split at a line end and the split
// point is the next shard's first document start.
TEST_F(TokenOutputDocumentsTest, ShardsSplitOnlyDocumentsThatFillAShard) {
  const std::string dir = NewTestDir("docs");
  const std::string small = dir + "/small.txt", long_one = dir + "/long.txt";
  std::ofstream(small, std::ios::binary) << "ab\ncd\n";  // 6 tokens
  std::string text;
  for (int i = 0; i < 10; ++i) text += "0123456789\n";  // 110 tokens, lines of 11
  std::ofstream(long_one, std::ios::binary) << text;
  const std::string out = NewTestDir("docs") + "/shards";
  ASSERT_TRUE(RunTextCommandQuietly(Options({small, long_one, small}, out, TextDocuments::kFiles, 30), bytes_)
                  .ok());
  const nlohmann::json manifest =
      nlohmann::json::parse(ReadFileBytes(absl::StrCat(out, "/", kShardManifestName)));
  // Shard 0: small (6) and long's first three lines: after two it holds
  //   28 (< 30); after three 39, of which long holds 33 >= 30: split.
  // Shards 1 and 2: three lines of long each (full, and long alone: split).
  // Shard 3: long's last line, then small, which begins a document but
  //   finds the shard not yet full.
  std::vector<int64_t> tokens, documents;
  std::vector<bool> continues;
  for (const nlohmann::json& shard : manifest["shards"]) {
    tokens.push_back(shard["tokens"].get<int64_t>());
    documents.push_back(shard["documents"].get<int64_t>());
    continues.push_back(shard["continues_document"].get<bool>());
  }
  EXPECT_EQ(tokens, (std::vector<int64_t>{39, 33, 33, 17}));
  EXPECT_EQ(documents, (std::vector<int64_t>{2, 1, 1, 2}));
  EXPECT_EQ(continues, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(manifest["corpus_documents"].get<int64_t>(), 3);
  auto shards = ListTokenShards(out);
  ASSERT_TRUE(shards.ok());
  ASSERT_EQ(shards->size(), 4u);
  EXPECT_EQ(StartsOf((*shards)[0]), (std::vector<uint64_t>{0, 6}));
  EXPECT_EQ(StartsOf((*shards)[3]), (std::vector<uint64_t>{0, 11}));
}

TEST_F(TokenOutputDocumentsTest, AResumedRunContinuesDocumentsExactly) {
  const std::vector<std::string> inputs = MakeRecordCorpus(&rng_);
  for (TextDocuments documents : {TextDocuments::kBlankLines, TextDocuments::kFiles}) {
    SCOPED_TRACE(TextDocumentsName(documents));
    const std::string whole = NewTestDir("docs") + "/whole";
    ASSERT_TRUE(RunTextCommandQuietly(Options(inputs, whole, documents, 400), bytes_).ok());
    const std::map<std::string, std::string> want = FilesOf(whole);
    const size_t shards = want.size() - 1;
    ASSERT_GT(shards, 8u);
    // Stopped after each of the first shards in turn: inside records,
    // before blank lines, at split points and at input boundaries.
    for (size_t stop_after = 1; stop_after < std::min<size_t>(shards, 16); ++stop_after) {
      const std::string dir = NewTestDir("docs") + "/interrupted";
      TextCommandOptions options = Options(inputs, dir, documents, 400);
      options.threads = 2;
      options.output.stop_after_shards = static_cast<int>(stop_after);
      ASSERT_EQ(RunTextCommandQuietly(options, bytes_).code(), absl::StatusCode::kAborted);
      options.output.stop_after_shards = 0;
      options.output.resume = true;
      ASSERT_TRUE(RunTextCommandQuietly(options, bytes_).ok());
      EXPECT_TRUE(FilesOf(dir) == want) << "stopped after " << stop_after;
    }
    // Resuming with the other --documents is refused by name.
    const std::string dir = NewTestDir("docs") + "/other";
    TextCommandOptions options = Options(inputs, dir, documents, 400);
    options.output.stop_after_shards = 2;
    ASSERT_EQ(RunTextCommandQuietly(options, bytes_).code(), absl::StatusCode::kAborted);
    options.output.stop_after_shards = 0;
    options.output.resume = true;
    options.output.documents = documents == TextDocuments::kFiles ? TextDocuments::kBlankLines
                                                                  : TextDocuments::kFiles;
    const absl::Status refused = RunTextCommandQuietly(options, bytes_);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.message().find(absl::StrCat("--documents ", TextDocumentsName(documents))),
              std::string::npos)
        << refused;
  }
}

TEST(TextCommandOptions, RefusesDocumentFlagsThatDoNotBelong) {
  auto parse = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"data", "text"});
    absl::StatusOr<ParsedArgs> args = ParseArgs(argv);
    EXPECT_TRUE(args.ok()) << args.status();
    return ParseTextCommandOptions(*args);
  };
  auto records = parse({"--out", "s/", "--documents", "blank-lines", "in.txt"});
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->output.documents, TextDocuments::kBlankLines);
  EXPECT_EQ(parse({"--out", "x.tok", "in.txt"})->output.documents, TextDocuments::kFiles);
  const absl::Status bad = parse({"--out", "s/", "--documents", "lines", "in.txt"}).status();
  EXPECT_NE(bad.message().find("--documents must be files or blank-lines"), std::string::npos)
      << bad;
  const absl::Status synthetic =
      parse({"--out", "s/", "--mean-document-tokens", "100", "in.txt"}).status();
  EXPECT_EQ(synthetic.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(synthetic.message().find("--mean-document-tokens is not a flag of data text"),
            std::string::npos)
      << synthetic;
}

}  // namespace
}  // namespace tessera

// Tokenizing a corpus: the ids are the same for every thread count and chunk
// size (byte-level and SentencePiece, and the same as the one-line-at-a-time
// encoder), shards begin at document starts (or split a document that alone
// fills --shard-tokens) and concatenate to the single-file output, the
// manifest describes them, an interrupted run resumes to the very same
// files, and a directory with earlier output is refused unless --resume or
// --restart says what to do. (Documents in depth: token_output_test.cc.)
#include "client/text_command.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/sentencepiece_text.h"
#include "client/sentencepiece_tokenizer.h"
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

void WriteGzip(const std::string& path, const std::string& content) {
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, content.data(), content.size());
  gzclose(gz);
}

// A few inputs of prose lines in random order and lengths (one gzip, one
// empty, one without a final newline), in a directory of their own.
std::string MakeCorpus() {
  std::mt19937 rng(std::random_device{}());
  std::vector<std::string> lines;
  std::istringstream corpus(ReadFileBytes(kTokenizerCorpus));
  for (std::string line; std::getline(corpus, line);) lines.push_back(line);
  auto text = [&](int n) {
    std::string t;
    for (int i = 0; i < n; ++i) {
      t += lines[rng() % lines.size()].substr(0, rng() % 200);
      t += "\n";
    }
    return t;
  };
  const std::string dir = NewTestDir("run") + "/corpus";
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/a.txt", std::ios::binary) << text(150);
  WriteGzip(dir + "/b.txt.gz", text(200));
  std::ofstream(dir + "/c_empty.txt", std::ios::binary) << "";
  std::string last = text(120);
  last.pop_back();
  std::ofstream(dir + "/d.txt", std::ios::binary) << last;
  return dir;
}

class CollectingSink : public EncodedChunkSink {
 public:
  absl::Status Add(const EncodedChunk& chunk) override {
    ids.insert(ids.end(), chunk.ids.begin(), chunk.ids.end());
    return absl::OkStatus();
  }
  std::vector<uint32_t> ids;
};

std::vector<uint32_t> TokensOf(const std::string& path) {
  auto file = TokenFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<uint32_t> ids;
  for (int64_t i = 0; file.ok() && i < (*file)->size(); ++i) ids.push_back((*file)->Token(i));
  return ids;
}

std::vector<uint64_t> DocumentStartsOf(const std::string& path) {
  auto file = TokenFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  EXPECT_TRUE((*file)->has_document_index()) << path;
  return std::vector<uint64_t>((*file)->document_starts().begin(),
                               (*file)->document_starts().end());
}

// The ids of a shard directory, in ListTokenShards order.
std::vector<uint32_t> TokensOfShards(const std::string& dir) {
  auto shards = ListTokenShards(dir);
  EXPECT_TRUE(shards.ok()) << shards.status();
  std::vector<uint32_t> ids;
  for (const std::string& shard : shards.ok() ? *shards : std::vector<std::string>{}) {
    const std::vector<uint32_t> part = TokensOf(shard);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

TextCommandOptions Options(const std::string& corpus, const std::string& out, int threads,
                           int64_t shard_tokens) {
  TextCommandOptions options;
  options.input_names = {corpus};
  options.threads = threads;
  options.output.path = out;
  options.output.directory = shard_tokens > 0;
  if (shard_tokens > 0) options.output.shard_tokens = shard_tokens;
  return options;
}

class TextCommandTest : public ::testing::Test {
 protected:
  std::unique_ptr<SentencePieceLineEncoder> LoadModel() { return LoadTrainedBpeModel(); }
};

TEST_F(TextCommandTest, IdsDoNotDependOnThreadsOrChunkSize) {
  const std::string corpus = MakeCorpus();
  auto inputs = ExpandTextInputs({corpus});
  ASSERT_TRUE(inputs.ok());
  const std::unique_ptr<SentencePieceLineEncoder> sentencepiece = LoadModel();
  const ByteLineEncoder bytes;
  for (const LineEncoder* encoder : {static_cast<const LineEncoder*>(sentencepiece.get()),
                                     static_cast<const LineEncoder*>(&bytes)}) {
    CollectingSink reference;
    ASSERT_TRUE(TokenizeCorpus(*inputs, *encoder, {1, 1 << 20, {}}, &reference).ok());
    ASSERT_GT(reference.ids.size(), 1000u);
    for (int threads : {1, 2, 3, 8}) {
      for (int64_t chunk_bytes : {1, 100, 4096}) {
        CollectingSink sink;
        ASSERT_TRUE(TokenizeCorpus(*inputs, *encoder, {threads, chunk_bytes, {}}, &sink).ok());
        ASSERT_TRUE(sink.ids == reference.ids) << threads << " threads, chunks " << chunk_bytes;
      }
    }
  }
  // The same ids as the one-process, one-line-at-a-time encoder.
  const std::string single = NewTestDir("run") + "/single.tok";
  std::vector<std::string> paths;
  for (const TextInput& input : *inputs) paths.push_back(input.path);
  const std::string plain = NewTestDir("run") + "/b.txt";  // that encoder reads no gzip
  {
    gzFile gz = gzopen((corpus + "/b.txt.gz").c_str(), "rb");
    std::string text(1 << 20, '\0');
    text.resize(gzread(gz, text.data(), text.size()));
    gzclose(gz);
    std::ofstream(plain, std::ios::binary) << text;
  }
  paths[1] = plain;
  ASSERT_TRUE(BuildSentencePieceTokenFileFromText(paths, TrainedBpeModelPath(), single).ok());
  const std::string file = NewTestDir("run") + "/parallel.tok";
  ASSERT_TRUE(RunTextCommandQuietly(Options(corpus, file, 3, 0), *sentencepiece).ok());
  EXPECT_TRUE(TokensOf(file) == TokensOf(single));
}

TEST_F(TextCommandTest, ShardsBeginAtDocumentsAndMatchTheSingleFile) {
  const std::string corpus = MakeCorpus();
  const std::unique_ptr<SentencePieceLineEncoder> encoder = LoadModel();
  for (TextDocuments documents : {TextDocuments::kFiles, TextDocuments::kBlankLines}) {
    SCOPED_TRACE(TextDocumentsName(documents));
    const std::string file = NewTestDir("run") + "/all.tok";
    TextCommandOptions single = Options(corpus, file, 2, 0);
    single.output.documents = documents;
    ASSERT_TRUE(RunTextCommandQuietly(single, *encoder).ok());
    const std::vector<uint32_t> all = TokensOf(file);
    const std::vector<uint64_t> all_starts = DocumentStartsOf(file);
    const int64_t shard_tokens = 700;
    const std::string dir = NewTestDir("run") + "/shards";
    TextCommandOptions sharded = Options(corpus, dir, 2, shard_tokens);
    sharded.output.documents = documents;
    ASSERT_TRUE(RunTextCommandQuietly(sharded, *encoder).ok());
    EXPECT_TRUE(TokensOfShards(dir) == all);

    auto shards = ListTokenShards(dir);
    ASSERT_TRUE(shards.ok());
    ASSERT_GT(shards->size(), 3u);
    const nlohmann::json manifest =
        nlohmann::json::parse(ReadFileBytes(absl::StrCat(dir, "/", kShardManifestName)));
    EXPECT_TRUE(manifest["complete"].get<bool>());
    EXPECT_EQ(manifest["shard_tokens"].get<int64_t>(), shard_tokens);
    EXPECT_EQ(manifest["documents"].get<std::string>(), TextDocumentsName(documents));
    EXPECT_EQ(manifest["tokens"].get<size_t>(), all.size());
    EXPECT_EQ(manifest["corpus_documents"].get<size_t>(), all_starts.size());
    EXPECT_EQ(manifest["tokenizer"]["vocab_size"].get<int>(), 400);
    EXPECT_EQ(manifest["tokenizer"]["sha256"].get<std::string>(), encoder->info().model_sha256);
    EXPECT_EQ(manifest["inputs"].size(), 4u);
    ASSERT_EQ(manifest["shards"].size(), shards->size());
    int64_t text_bytes = 0;
    uint64_t base = 0;  // the shard's first token in the single file
    std::vector<uint64_t> corpus_starts;  // the shards' starts, split points left out
    int splits = 0;
    for (size_t i = 0; i < shards->size(); ++i) {
      const nlohmann::json& entry = manifest["shards"][i];
      EXPECT_EQ(absl::StrCat(dir, "/", entry["name"].get<std::string>()), (*shards)[i]);
      const std::vector<uint32_t> ids = TokensOf((*shards)[i]);
      const std::vector<uint64_t> starts = DocumentStartsOf((*shards)[i]);
      EXPECT_EQ(entry["tokens"].get<size_t>(), ids.size());
      EXPECT_EQ(entry["documents"].get<size_t>(), starts.size());
      ASSERT_FALSE(starts.empty());
      EXPECT_EQ(starts[0], 0u);  // every shard begins a document of its own
      const bool continues = entry["continues_document"].get<bool>();
      for (size_t d = continues ? 1 : 0; d < starts.size(); ++d) {
        corpus_starts.push_back(base + starts[d]);
      }
      text_bytes += entry["text_bytes"].get<int64_t>();
      auto decoded = SentencePieceTokenizer::Load(TrainedBpeModelPath());
      ASSERT_TRUE(decoded.ok());
      auto text = (*decoded)->Decode(ids);
      ASSERT_TRUE(text.ok());
      EXPECT_EQ(static_cast<int64_t>(text->size()), entry["text_bytes"].get<int64_t>());
      if (i + 1 < shards->size()) {
        // Full, ended at a line end, and followed by a document start or,
        // inside a document that alone fills the limit, by its split rest.
        EXPECT_GE(static_cast<int64_t>(ids.size()), shard_tokens) << i;
        EXPECT_EQ(text->back(), '\n') << i;
        EXPECT_LT(ids.size(), 3u * shard_tokens) << i;
        if (manifest["shards"][i + 1]["continues_document"].get<bool>()) {
          ++splits;
          EXPECT_GE(static_cast<int64_t>(ids.size() - starts.back()), shard_tokens) << i;
        }
      }
      base += ids.size();
    }
    // Apart from the split points, the shards record the single file's starts.
    EXPECT_EQ(corpus_starts, all_starts);
    if (documents == TextDocuments::kFiles) {
      EXPECT_GT(splits, 0);  // files of ~5000 tokens
    }
    int64_t corpus_bytes = 0;
    for (const char* name : {"/a.txt", "/d.txt"}) corpus_bytes += ReadFileBytes(corpus + name).size();
    EXPECT_GT(text_bytes, corpus_bytes);  // b.txt.gz counts decompressed
  }
}

TEST_F(TextCommandTest, AnInterruptedRunResumesToTheSameFiles) {
  const std::string corpus = MakeCorpus();
  const ByteLineEncoder bytes;
  const std::unique_ptr<SentencePieceLineEncoder> sentencepiece = LoadModel();
  for (const LineEncoder* encoder : {static_cast<const LineEncoder*>(sentencepiece.get()),
                                     static_cast<const LineEncoder*>(&bytes)}) {
    const std::string whole = NewTestDir("run") + "/whole";
    ASSERT_TRUE(RunTextCommandQuietly(Options(corpus, whole, 2, 1500), *encoder).ok());
    auto expected = ListTokenShards(whole);
    ASSERT_TRUE(expected.ok());
    ASSERT_GT(expected->size(), 4u);

    for (int stop_after : {1, 3}) {
      const std::string dir = NewTestDir("run") + "/interrupted";
      TextCommandOptions options = Options(corpus, dir, 2, 1500);
      options.output.stop_after_shards = stop_after;
      absl::Status stopped = RunTextCommandQuietly(options, *encoder);
      ASSERT_EQ(stopped.code(), absl::StatusCode::kAborted) << stopped;
      // What a crash can also leave: a half-written shard under its
      // temporary name, and a finished shard the manifest does not list yet.
      std::ofstream(absl::StrCat(dir, "/shard-000009.tok.tmp.written.tmp.77")) << "half";
      std::ofstream(absl::StrCat(dir, "/shard-", std::string(6 - 1, '0'), stop_after, ".tok"))
          << "renamed, not yet in the manifest";

      options.output.stop_after_shards = 0;
      absl::Status refused = RunTextCommandQuietly(options, *encoder);
      EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
      EXPECT_NE(refused.message().find("unfinished"), std::string::npos) << refused;
      EXPECT_NE(refused.message().find("--resume"), std::string::npos) << refused;

      options.output.resume = true;
      ASSERT_TRUE(RunTextCommandQuietly(options, *encoder).ok());
      auto resumed = ListTokenShards(dir);
      ASSERT_TRUE(resumed.ok());
      ASSERT_EQ(resumed->size(), expected->size());
      for (size_t i = 0; i < expected->size(); ++i) {
        EXPECT_TRUE(ReadFileBytes((*resumed)[i]) == ReadFileBytes((*expected)[i])) << i;
      }
      const nlohmann::json got =
          nlohmann::json::parse(ReadFileBytes(absl::StrCat(dir, "/", kShardManifestName)));
      const nlohmann::json want =
          nlohmann::json::parse(ReadFileBytes(absl::StrCat(whole, "/", kShardManifestName)));
      EXPECT_EQ(got["shards"], want["shards"]);
      EXPECT_EQ(got["tokens"], want["tokens"]);
      EXPECT_TRUE(got["complete"].get<bool>());
      // Resuming finished output changes nothing.
      ASSERT_TRUE(RunTextCommandQuietly(options, *encoder).ok());
      EXPECT_EQ(ListTokenShards(dir)->size(), expected->size());
    }
  }
}

TEST_F(TextCommandTest, EarlierOutputIsRefusedUnlessResumedOrRestarted) {
  const std::string corpus = MakeCorpus();
  const ByteLineEncoder bytes;
  const std::string dir = NewTestDir("run") + "/out";
  TextCommandOptions options = Options(corpus, dir, 2, 3000);
  ASSERT_TRUE(RunTextCommandQuietly(options, bytes).ok());
  const std::vector<uint32_t> first = TokensOfShards(dir);

  absl::Status again = RunTextCommandQuietly(options, bytes);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("already holds finished"), std::string::npos) << again;

  // --resume with other settings than the manifest's is refused.
  TextCommandOptions other = options;
  other.output.resume = true;
  other.output.shard_tokens = 2999;
  absl::Status mismatch = RunTextCommandQuietly(other, bytes);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.message().find("--shard-tokens 3000"), std::string::npos) << mismatch;
  other = options;
  other.output.resume = true;
  other.input_names = {corpus + "/a.txt"};
  EXPECT_EQ(RunTextCommandQuietly(other, bytes).code(), absl::StatusCode::kFailedPrecondition);

  // --restart deletes the old shards and writes anew.
  other = options;
  other.output.restart = true;
  other.output.shard_tokens = 1000;
  ASSERT_TRUE(RunTextCommandQuietly(other, bytes).ok());
  EXPECT_TRUE(TokensOfShards(dir) == first);
  EXPECT_GT(ListTokenShards(dir)->size(), 3u);

  // A file that is not ours stops even --restart.
  std::ofstream(dir + "/notes.txt") << "mine";
  absl::Status foreign = RunTextCommandQuietly(other, bytes);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.message().find("notes.txt"), std::string::npos) << foreign;
}

TEST_F(TextCommandTest, TextTheModelCannotKeepIsRefusedNamingFileAndLine) {
  const std::string dir = NewTestDir("run");
  std::ofstream(dir + "/bad.txt", std::ios::binary) << "fine\nalso fine\nna\xefve caf\xe9\n";
  const std::unique_ptr<SentencePieceLineEncoder> encoder = LoadModel();
  absl::Status s = RunTextCommandQuietly(Options(dir + "/bad.txt", dir + "/bad.tok", 2, 0), *encoder);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(dir + "/bad.txt:3:"), std::string::npos) << s;
}

// The encoder decodes again only lines that could change; this holds the
// model to keeping every other line: random valid UTF-8 from every plane,
// with spaces, tabs, carriage returns and control characters.
TEST_F(TextCommandTest, ValidUtf8SurvivesEncodingWithoutTheCheck) {
  std::mt19937 rng(std::random_device{}());
  auto tokenizer = SentencePieceTokenizer::Load(TrainedBpeModelPath());
  ASSERT_TRUE(tokenizer.ok());
  auto append = [](uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xc0 | code >> 6));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | code >> 12));
      out->push_back(static_cast<char>(0x80 | (code >> 6 & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | code >> 18));
      out->push_back(static_cast<char>(0x80 | (code >> 12 & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code >> 6 & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    }
  };
  const uint32_t limits[] = {0x80, 0x800, 0x10000, 0x110000};
  for (int line = 0; line < 2000; ++line) {
    std::string text;
    const int length = rng() % 40;
    for (int i = 0; i < length; ++i) {
      uint32_t code = 1 + rng() % (limits[rng() % 4] - 1);
      if ((code >= 0xd800 && code <= 0xdfff) || code == 0x2581) code = ' ';
      if (rng() % 4 == 0) code = " \t\r\x01" "e"[rng() % 5];
      append(code, &text);
    }
    text += "\n";
    ASSERT_FALSE(SentencePieceLineEncoder::MayChangeInEncoding(text)) << text;
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok());
    auto back = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(back.ok());
    ASSERT_TRUE(*back == text) << text;
  }
  for (const char* suspect : {"caf\xe9\n", "a\xe2\x96\x81" "b\n", "\xc0\xaf\n", "\xed\xa0\x80\n",
                              "\xf4\x90\x80\x80\n", "\xe2\x82\n", "\x80\n"}) {
    EXPECT_TRUE(SentencePieceLineEncoder::MayChangeInEncoding(suspect)) << suspect;
  }
  EXPECT_TRUE(SentencePieceLineEncoder::MayChangeInEncoding(std::string("a\0b\n", 4)));
  // And what could change is refused, not written.
  const std::unique_ptr<SentencePieceLineEncoder> encoder = LoadModel();
  std::vector<uint32_t> ids;
  EXPECT_FALSE(encoder->EncodeLine("a \xe2\x96\x81 b\n", &ids).ok());
}

TEST(TextCommandOptions, ParsesOutputKindsAndRefusesBadValues) {
  auto parse = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"data", "text"});
    absl::StatusOr<ParsedArgs> args = ParseArgs(argv);
    EXPECT_TRUE(args.ok()) << args.status();
    return ParseTextCommandOptions(*args);
  };
  auto file = parse({"--out", "x.tok", "in.txt"});
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(file->output.directory);
  EXPECT_GE(file->threads, 1);
  auto dir = parse({"--out", "shards/", "--threads", "3", "in.txt"});
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->output.directory);
  EXPECT_EQ(dir->output.path, "shards");
  EXPECT_EQ(dir->output.shard_tokens, kDefaultShardTokens);
  EXPECT_EQ(dir->threads, 3);
  auto sized = parse({"--out", "s", "--shard-tokens", "1000", "in.txt"});
  ASSERT_TRUE(sized.ok());
  EXPECT_TRUE(sized->output.directory);
  EXPECT_EQ(sized->output.shard_tokens, 1000);
  EXPECT_FALSE(parse({"--out", "s", "--threads", "0", "in.txt"}).ok());
  EXPECT_FALSE(parse({"--out", "s", "--shard-tokens", "-4", "in.txt"}).ok());
  EXPECT_FALSE(parse({"--out", "s", "--resume", "--restart", "in.txt"}).ok());
  EXPECT_FALSE(parse({"--out", "s", "--resume", "-"}).ok());
  EXPECT_FALSE(parse({"--out", "s"}).ok());
}

}  // namespace
}  // namespace tessera

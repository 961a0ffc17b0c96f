// Token files round-trip random tokens in both widths (the writer picks
// uint16 when every id fits), the tokenizer that made them and, in version
// 3, their document starts; version 1 and 2 files stay readable (without
// boundaries); malformed files and document indexes are rejected with
// INVALID_ARGUMENT naming the file and the reason.
#include "formats/token_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

int64_t FileBytes(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string WriteRaw(const std::string& name, const std::string& content) {
  std::ofstream out(TempPath(name), std::ios::binary);
  out << content;
  return TempPath(name);
}

TEST(TokenFile, RoundTripsRandomTokensInBothWidths) {
  std::mt19937 rng(std::random_device{}());
  struct Case {
    uint32_t limit;  // ids drawn from [0, limit)
    int width;       // bytes per stored token
  };
  for (Case c : {Case{65536, 2}, Case{1u << 31, 4}}) {
    std::vector<uint32_t> tokens(1000 + rng() % 1000);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % c.limit);
    if (c.width == 4) tokens[tokens.size() / 2] = 70000 + rng() % 1000;  // surely wide
    const uint32_t max_token = *std::max_element(tokens.begin(), tokens.end());
    const std::string path = TempPath(absl::StrCat("round", c.width, ".tok"));
    ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
    EXPECT_EQ(FileBytes(path), int64_t{80} + c.width * static_cast<int64_t>(tokens.size()));
    auto file = TokenFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ((*file)->size(), static_cast<int64_t>(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ((*file)->Token(i), tokens[i]) << i;
    EXPECT_EQ((*file)->max_token(), max_token);
  }
}

TEST(TokenFile, HeaderLayoutIsAsDocumented) {
  const std::string path = TempPath("layout.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{3, 9, 4}).ok());
  const std::string bytes = ReadAll(path);
  ASSERT_EQ(bytes.size(), 80u + 3 * 2);
  EXPECT_EQ(std::memcmp(bytes.data(), "TSRTOKN\0", 8), 0);
  uint32_t version, dtype, vocab_hint;
  uint64_t count;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&dtype, bytes.data() + 12, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  std::memcpy(&vocab_hint, bytes.data() + 24, 4);
  EXPECT_EQ(version, 2u);
  EXPECT_EQ(dtype, 1u);
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(vocab_hint, 10u);
  EXPECT_EQ(bytes.substr(28, 52), std::string(52, '\0'));  // no tokenizer recorded
  EXPECT_EQ(static_cast<uint8_t>(bytes[80 + 2]), 9);  // little-endian second token
}

TEST(TokenFile, RecordsTheTokenizer) {
  TokenizerInfo info;
  info.kind = TokenizerKind::kSentencePiece;
  info.vocab_size = 5000;
  info.model_sha256 = std::string(62, 'a') + "0f";
  const std::string path = TempPath("sp.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{4999, 0, 17}, info).ok());
  const std::string bytes = ReadAll(path);
  uint32_t kind, vocab;
  std::memcpy(&kind, bytes.data() + 28, 4);
  std::memcpy(&vocab, bytes.data() + 32, 4);
  EXPECT_EQ(kind, 2u);
  EXPECT_EQ(vocab, 5000u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[40]), 0xaa);
  EXPECT_EQ(static_cast<uint8_t>(bytes[71]), 0x0f);
  auto header = ReadTokenFileHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->tokenizer.kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(header->tokenizer.vocab_size, 5000u);
  EXPECT_EQ(header->tokenizer.model_sha256, info.model_sha256);
  EXPECT_EQ(header->count, 3u);
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tokenizer().ToString(),
            "sentencepiece (vocab 5000, model sha256 " + info.model_sha256 + ")");
  // An id the tokenizer does not have, or a malformed hash, is not written.
  EXPECT_EQ(WriteTokenFile(TempPath("x.tok"), std::vector<uint32_t>{5000}, info).code(),
            absl::StatusCode::kInvalidArgument);
  info.model_sha256 = "abc";
  EXPECT_EQ(WriteTokenFile(TempPath("x.tok"), std::vector<uint32_t>{1}, info).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteTokenFile(TempPath("x.tok"), std::vector<uint32_t>{300}, TokenizerInfo::Byte()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenFile, VersionOneFilesStayReadable) {
  // The 32-byte header of version 1, then uint16 tokens 7, 300, 2.
  std::string v1(32, '\0');
  std::memcpy(v1.data(), "TSRTOKN\0", 8);
  const uint32_t version = 1, dtype = 1, hint = 301;
  const uint64_t count = 3;
  std::memcpy(v1.data() + 8, &version, 4);
  std::memcpy(v1.data() + 12, &dtype, 4);
  std::memcpy(v1.data() + 16, &count, 8);
  std::memcpy(v1.data() + 24, &hint, 4);
  for (uint16_t t : {uint16_t{7}, uint16_t{300}, uint16_t{2}}) {
    v1.append(reinterpret_cast<const char*>(&t), 2);
  }
  const std::string path = WriteRaw("v1.tok", v1);
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), 3);
  EXPECT_EQ((*file)->Token(1), 300u);
  EXPECT_EQ((*file)->max_token(), 300u);
  EXPECT_FALSE((*file)->tokenizer().recorded());
  auto header = ReadTokenFileHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->version, 1u);
  EXPECT_EQ(header->tokenizer.kind, TokenizerKind::kNotRecorded);
}

TEST(TokenFile, EmptyTokenListRoundTrips) {
  const std::string path = TempPath("empty.tok");
  ASSERT_TRUE(WriteTokenFile(path, {}).ok());
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size(), 0);
}

TEST(TokenFile, MalformedFilesAreRejectedWithTheReason) {
  const std::string path = TempPath("ok.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 3, 4}).ok());
  const std::string bytes = ReadAll(path);
  auto expect_reason = [](const std::string& file, const std::string& reason) {
    auto opened = TokenFile::Open(file);
    ASSERT_FALSE(opened.ok()) << file;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << opened.status();
    EXPECT_NE(opened.status().message().find(reason), std::string::npos) << opened.status();
  };
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  expect_reason(WriteRaw("magic.tok", bad_magic), "not a Tessera token file (bad magic)");
  expect_reason(WriteRaw("short.tok", bytes.substr(0, 20)), "not a Tessera token file");
  expect_reason(WriteRaw("trunc.tok", bytes.substr(0, bytes.size() - 2)),
                "truncated: header says 4 tokens but the file holds 3");
  expect_reason(WriteRaw("long.tok", bytes + "xy"), "trailing data");
  std::string v4 = bytes;
  v4[8] = 4;
  expect_reason(WriteRaw("v4.tok", v4), "unsupported version 4");
  std::string kind9 = bytes;
  kind9[28] = 9;
  expect_reason(WriteRaw("kind.tok", kind9), "unknown tokenizer kind 9");
  expect_reason(WriteRaw("v2short.tok", bytes.substr(0, 40)), "shorter than its version 2 header");
  std::string dtype7 = bytes;
  dtype7[12] = 7;
  expect_reason(WriteRaw("dtype.tok", dtype7), "unknown token dtype 7");
  std::string low_hint = bytes;
  low_hint[24] = 2;  // claims ids < 2, holds 4
  expect_reason(WriteRaw("hint.tok", low_hint), "vocab_hint");
  EXPECT_EQ(TokenFile::Open(TempPath("missing.tok")).status().code(),
            absl::StatusCode::kNotFound);
  // A FIFO is refused without waiting for a writer; its header too.
  const std::string fifo = TempPath("fifo.tok");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_reason(fifo, "not a regular file");
  EXPECT_EQ(ReadTokenFileHeader(fifo).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteTokenFile(TempPath("max.tok"), std::vector<uint32_t>{UINT32_MAX}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Writes `tokens` with document starts `starts` and returns the bytes.
std::string WriteWithDocuments(const std::string& name, const std::vector<uint32_t>& tokens,
                               const std::vector<uint64_t>& starts) {
  const absl::Status written =
      WriteTokenFile(TempPath(name), tokens, {}, absl::MakeConstSpan(starts));
  EXPECT_TRUE(written.ok()) << written;
  return ReadAll(TempPath(name));
}

TEST(TokenFileDocuments, RoundTripRandomDocumentsInBothWidthsWithPadding) {
  std::mt19937 rng(std::random_device{}());
  for (uint32_t limit : {1000u, 100000u}) {
    for (int trial = 0; trial < 8; ++trial) {
      // Odd counts too, so the uint16 tokens end off an 8-byte boundary.
      std::vector<uint32_t> tokens(1 + rng() % 300);
      for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % limit);
      std::vector<uint64_t> starts = {0};
      for (uint64_t i = 1; i < tokens.size(); ++i) {
        if (rng() % 7 == 0) starts.push_back(i);
      }
      const std::string name = absl::StrCat("docs", limit, "_", trial, ".tok");
      const std::string bytes = WriteWithDocuments(name, tokens, starts);
      const size_t width = limit > 65536 ? 4 : 2;
      const size_t padded = (tokens.size() * width + 7) / 8 * 8;
      ASSERT_EQ(bytes.size(), 80 + padded + 8 * starts.size());
      auto file = TokenFile::Open(TempPath(name));
      ASSERT_TRUE(file.ok()) << file.status();
      ASSERT_TRUE((*file)->has_document_index());
      ASSERT_EQ((*file)->document_starts().size(), starts.size());
      for (size_t i = 0; i < starts.size(); ++i) EXPECT_EQ((*file)->document_starts()[i], starts[i]);
      for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ((*file)->Token(i), tokens[i]) << i;
      // DocumentStartAt against a linear scan.
      for (int64_t t = 0; t < (*file)->size(); ++t) {
        int64_t want = 0;
        for (uint64_t s : starts) {
          if (static_cast<int64_t>(s) <= t) want = static_cast<int64_t>(s);
        }
        ASSERT_EQ((*file)->DocumentStartAt(t), want) << t;
      }
      auto header = ReadTokenFileHeader(TempPath(name));
      ASSERT_TRUE(header.ok()) << header.status();
      EXPECT_EQ(header->version, 3u);
      EXPECT_TRUE(header->has_document_index);
      EXPECT_EQ(header->document_count, starts.size());
    }
  }
}

TEST(TokenFileDocuments, HeaderLayoutIsAsDocumented) {
  const std::string bytes = WriteWithDocuments("doclayout.tok", {5, 6, 7}, {0, 2});
  ASSERT_EQ(bytes.size(), 80u + 8 + 16);  // 3 uint16 tokens padded to 8 bytes, 2 starts
  uint32_t version, flags;
  uint64_t documents, second_start;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&flags, bytes.data() + 36, 4);
  std::memcpy(&documents, bytes.data() + 72, 8);
  std::memcpy(&second_start, bytes.data() + 80 + 8 + 8, 8);
  EXPECT_EQ(version, 3u);
  EXPECT_EQ(flags, 1u);
  EXPECT_EQ(documents, 2u);
  EXPECT_EQ(second_start, 2u);
  EXPECT_EQ(bytes.substr(86, 2), std::string(2, '\0'));  // padding
}

TEST(TokenFileDocuments, FilesWithoutStartsStayVersionTwoAndHaveNoIndex) {
  const std::string path = TempPath("nodocs.tok");
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 3}).ok());
  auto header = ReadTokenFileHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->version, 2u);
  EXPECT_FALSE(header->has_document_index);
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE((*file)->has_document_index());
  EXPECT_TRUE((*file)->document_starts().empty());
  EXPECT_EQ((*file)->DocumentStartAt(2), 0);
  // An empty file with an (empty) index is version 3 with no documents.
  ASSERT_TRUE(WriteTokenFile(TempPath("emptydocs.tok"), {}, {}, absl::Span<const uint64_t>()).ok());
  auto empty = TokenFile::Open(TempPath("emptydocs.tok"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE((*empty)->has_document_index());
  EXPECT_EQ((*empty)->size(), 0);
}

TEST(TokenFileDocuments, TheWriterRefusesMalformedStarts) {
  const std::vector<uint32_t> tokens = {1, 2, 3, 4};
  struct Case {
    std::vector<uint64_t> starts;
    std::string reason;
  };
  for (const Case& c : {Case{{1, 2}, "document start [0] is 1, not 0"},
                        Case{{0, 2, 2}, "not strictly increasing"},
                        Case{{0, 3, 1}, "not strictly increasing"},
                        Case{{0, 4}, "document start [1] = 4 is out of range (4 tokens)"},
                        Case{{}, "no document starts for 4 tokens"}}) {
    const absl::Status s =
        WriteTokenFile(TempPath("badstarts.tok"), tokens, {}, absl::MakeConstSpan(c.starts));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s;
  }
}

TEST(TokenFileDocuments, MalformedIndexesAreRejectedNamingTheFileAndReason) {
  // Tokens 1..4 (8 bytes, no padding), starts {0, 2}: the index is the last 16 bytes.
  const std::string bytes = WriteWithDocuments("docok.tok", {1, 2, 3, 4}, {0, 2});
  ASSERT_EQ(bytes.size(), 80u + 8 + 16);
  auto with_start = [&](int index, uint64_t value) {
    std::string b = bytes;
    std::memcpy(b.data() + 88 + 8 * index, &value, 8);
    return b;
  };
  auto expect_reason = [](const std::string& name, const std::string& content,
                          const std::string& reason) {
    const std::string path = WriteRaw(name, content);
    auto opened = TokenFile::Open(path);
    ASSERT_FALSE(opened.ok()) << name;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << opened.status();
    EXPECT_NE(opened.status().message().find(path), std::string::npos) << opened.status();
    EXPECT_NE(opened.status().message().find(reason), std::string::npos) << opened.status();
  };
  expect_reason("firstnotzero.tok", with_start(0, 1), "document start [0] is 1, not 0");
  expect_reason("notincreasing.tok", with_start(1, 0), "not strictly increasing");
  expect_reason("outofrange.tok", with_start(1, 4), "out of range (4 tokens)");
  expect_reason("hugestart.tok", with_start(1, ~uint64_t{0}), "out of range");
  expect_reason("indextrunc.tok", bytes.substr(0, bytes.size() - 3), "document index truncated");
  expect_reason("indexlong.tok", bytes + "12345678", "trailing data: 8 bytes after the document index");
  std::string huge_count = bytes;
  const uint64_t huge = uint64_t{1} << 61;
  std::memcpy(huge_count.data() + 72, &huge, 8);
  expect_reason("hugecount.tok", huge_count, "truncated");
  std::string zero_docs = bytes.substr(0, 88);
  const uint64_t zero = 0;
  std::memcpy(zero_docs.data() + 72, &zero, 8);
  expect_reason("zerodocs.tok", zero_docs, "0 documents for 4 tokens");
  std::string flags = bytes;
  flags[36] = 3;
  expect_reason("flags.tok", flags, "unknown flags 0x3");
  std::string no_flag = bytes;
  no_flag[36] = 0;
  expect_reason("noflag.tok", no_flag, "no document index flag");
}

}  // namespace
}  // namespace tessera

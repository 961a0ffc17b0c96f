// Test-only helpers shared by the tests of `tessera data text`
// (text_command_test.cc, token_output_test.cc): a fresh directory under the
// test's temporary directory, a file's bytes, one quiet run of the command,
// and the small BPE model both tokenize with, trained once per test binary
// from client/testdata/tokenizer_corpus.txt.
#ifndef TESSERA_CLIENT_TEXT_COMMAND_TEST_UTIL_H_
#define TESSERA_CLIENT_TEXT_COMMAND_TEST_UTIL_H_

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/sentencepiece_text.h"
#include "client/sentencepiece_tokenizer.h"
#include "client/text_command.h"
#include "gtest/gtest.h"

namespace tessera {
namespace testing {

inline constexpr char kTokenizerCorpus[] = "client/testdata/tokenizer_corpus.txt";

// A new empty directory, TEST_TMPDIR/<prefix><n>.
inline std::string NewTestDir(const std::string& prefix) {
  static int counter = 0;
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", prefix, ++counter);
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// RunTextCommand with its report and progress discarded.
inline absl::Status RunTextCommandQuietly(const TextCommandOptions& options,
                                          const LineEncoder& encoder) {
  std::ostringstream out, progress;
  return RunTextCommand(options, encoder, out, progress, /*terminal=*/false);
}

// The BPE model (vocabulary 400) trained from kTokenizerCorpus, once per
// binary; empty (with a test failure) if training failed.
inline const std::string& TrainedBpeModelPath() {
  static const std::string* path = [] {
    auto* p = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/bpe.model"));
    const absl::Status trained = TrainBpeTokenizer({kTokenizerCorpus}, 400, *p);
    EXPECT_TRUE(trained.ok()) << trained;
    if (!trained.ok()) p->clear();
    return p;
  }();
  return *path;
}

// The trained model as a line encoder; null (with a test failure) if it
// cannot be loaded.
inline std::unique_ptr<SentencePieceLineEncoder> LoadTrainedBpeModel() {
  auto encoder = SentencePieceLineEncoder::Load(TrainedBpeModelPath());
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  if (!encoder.ok()) return nullptr;
  return std::move(*encoder);
}

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_CLIENT_TEXT_COMMAND_TEST_UTIL_H_

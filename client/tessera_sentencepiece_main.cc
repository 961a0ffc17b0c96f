// tessera-sentencepiece: the SentencePiece half of `tessera data`, run by
// the tessera CLI as a child process (client/tokenizer_helper.h).
//
// It is a program of its own because Debian's libsentencepiece 0.1.97
// carries a private copy of protobuf-lite 3.14 whose exported symbols clash
// with the system protobuf 3.21 that the gRPC client links: a process that
// loads both fails protobuf's version check. This binary links no protobuf.
//
//   tessera-sentencepiece train VOCAB_SIZE OUT_MODEL CORPUS...
//   tessera-sentencepiece encode [--documents=files|blank-lines] MODEL OUT_TOKENS TEXT...
//     (one thread, one file: the reference the parallel path is tested against)
//   tessera-sentencepiece text --tokenizer=MODEL --out=PATH [FLAGS] INPUT...
//     (`tessera data text` with a model: the same flags, passed on by the CLI)
// Prints one result line; errors go to stderr. Exit codes as the CLI's:
// 0 done, 1 failed, 2 bad usage.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "client/cli_args.h"
#include "client/text_command.h"
#include "client/sentencepiece_text.h"
#include "client/sentencepiece_tokenizer.h"
#include "formats/token_file.h"

namespace tessera {
namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

int Train(const std::vector<std::string>& args) {
  int vocab_size = 0;
  if (args.size() < 3 || !absl::SimpleAtoi(args[0], &vocab_size)) {
    std::cerr << "usage: tessera-sentencepiece train VOCAB_SIZE OUT_MODEL CORPUS...\n";
    return kUsage;
  }
  if (vocab_size < kMinSentencePieceVocab || vocab_size > kMaxSentencePieceVocab) {
    std::cerr << "--vocab_size must be in [" << kMinSentencePieceVocab << ", "
              << kMaxSentencePieceVocab
              << "] (256 byte pieces and 3 special pieces come first), got " << vocab_size << "\n";
    return kUsage;
  }
  const std::vector<std::string> corpus(args.begin() + 2, args.end());
  if (absl::Status s = TrainBpeTokenizer(corpus, vocab_size, args[1]); !s.ok()) {
    std::cerr << s.message() << "\n";
    return kFailed;
  }
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> trained =
      SentencePieceTokenizer::Load(args[1]);
  if (!trained.ok()) {
    std::cerr << trained.status().message() << "\n";
    return kFailed;
  }
  std::cout << "wrote " << args[1] << ": " << (*trained)->info().ToString() << "\n";
  return kOk;
}

int Encode(std::vector<std::string> args) {
  TextDocuments documents = TextDocuments::kFiles;
  constexpr absl::string_view kDocumentsFlag = "--documents=";
  if (!args.empty() && absl::StartsWith(args[0], kDocumentsFlag)) {
    absl::StatusOr<TextDocuments> parsed =
        ParseTextDocuments(absl::string_view(args[0]).substr(kDocumentsFlag.size()));
    if (!parsed.ok()) {
      std::cerr << parsed.status().message() << "\n";
      return kUsage;
    }
    documents = *parsed;
    args.erase(args.begin());
  }
  if (args.size() < 3) {
    std::cerr << "usage: tessera-sentencepiece encode [--documents=files|blank-lines] MODEL "
                 "OUT_TOKENS TEXT...\n";
    return kUsage;
  }
  const std::vector<std::string> texts(args.begin() + 2, args.end());
  absl::StatusOr<int64_t> tokens =
      BuildSentencePieceTokenFileFromText(texts, args[0], args[1], documents);
  if (!tokens.ok()) {
    std::cerr << tokens.status().message() << "\n";
    return kFailed;
  }
  std::cout << "wrote " << *tokens << " tokens to " << args[1];
  if (absl::StatusOr<TokenFileHeader> header = ReadTokenFileHeader(args[1]); header.ok()) {
    std::cout << " (tokenizer: " << header->tokenizer.ToString() << ")";
  }
  std::cout << "\n";
  return kOk;
}

// `tessera data text --tokenizer MODEL ...`, parsed as the CLI parses it.
int Text(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"data", "text"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(argv);
  absl::StatusOr<TextCommandOptions> options =
      parsed.ok() ? ParseTextCommandOptions(*parsed) : parsed.status();
  if (!options.ok()) {
    std::cerr << "tessera data text: " << options.status().message() << "\n";
    return kUsage;
  }
  absl::StatusOr<std::unique_ptr<SentencePieceLineEncoder>> encoder =
      SentencePieceLineEncoder::Load(options->tokenizer_model);
  absl::Status status = encoder.status();
  if (status.ok()) {
    status = RunTextCommand(*options, **encoder, std::cout, std::cerr, isatty(STDERR_FILENO));
  }
  if (!status.ok()) {
    std::cerr << "tessera data text: " << status.message() << "\n";
    return kFailed;
  }
  return kOk;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "train") {
    return tessera::Train(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && args[0] == "encode") {
    return tessera::Encode(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && args[0] == "text") {
    return tessera::Text(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::cerr << "usage: tessera-sentencepiece train|encode|text ...\n";
  return tessera::kUsage;
}

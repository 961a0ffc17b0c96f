// `tessera data text`, the part both processes share: the CLI runs it with
// the byte-level encoder, and the tessera-sentencepiece helper runs it with
// a SentencePiece model (which cannot be loaded into the CLI; see
// tessera_sentencepiece_main.cc). It expands the inputs, tokenizes them on
// the requested threads into a file or a shard directory, shows progress on
// standard error and ends with a summary line.
#ifndef TESSERA_CLIENT_TEXT_COMMAND_H_
#define TESSERA_CLIENT_TEXT_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli_args.h"
#include "client/corpus_tokenizer.h"
#include "client/token_output.h"

namespace tessera {

struct TextCommandOptions {
  std::vector<std::string> input_names;  // as given: files, directories, globs, "-"
  std::string tokenizer_model;           // empty: byte-level
  int threads = 1;
  int64_t chunk_bytes = CorpusTokenizerOptions().chunk_bytes;  // text per encoding task
  TokenOutputOptions output;
};

// The options of `data text` (args.positional[0] == "text").
// INVALID_ARGUMENT with a one-line reason for bad usage. --out names a
// directory when it ends in "/", is an existing directory, or any of
// --shard-tokens, --resume and --restart is given.
absl::StatusOr<TextCommandOptions> ParseTextCommandOptions(const ParsedArgs& args);

// The arguments that make the tessera-sentencepiece helper run the same
// command ("text", then flags and inputs).
std::vector<std::string> TextCommandHelperArgs(const ParsedArgs& args);

// Tokenizes with `encoder`. Progress goes to `progress` (a bar when
// `terminal`), the summary line to `out`. Errors name the input or the
// output and say what to do.
absl::Status RunTextCommand(const TextCommandOptions& options, const LineEncoder& encoder,
                            std::ostream& out, std::ostream& progress, bool terminal);

}  // namespace tessera

#endif  // TESSERA_CLIENT_TEXT_COMMAND_H_

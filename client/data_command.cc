// `tessera data text|synthetic|tokenizer train` (see data_command.h).
#include "client/data_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/text_command.h"
#include "client/tokenizer_helper.h"
#include "common/synthetic_task.h"

namespace tessera {
namespace {

// Runs the SentencePiece helper and passes its answer on: its line to
// `out` when it succeeded, else to `err`, prefixed with the command.
int RunHelper(const std::string& command, const std::vector<std::string>& args,
              std::ostream& out, std::ostream& err) {
  absl::StatusOr<HelperResult> result = RunTokenizerHelper(args);
  if (!result.ok()) {
    err << command << ": " << result.status().message() << "\n";
    return kExitFailed;
  }
  if (result->exit_code == kExitOk) {
    out << result->output;
    return kExitOk;
  }
  err << command << ": " << result->output;
  return result->exit_code == kExitUsage ? kExitUsage : kExitFailed;
}

// `tessera data tokenizer train --vocab_size N --out MODEL CORPUS...`.
int RunTokenizerCommand(const ParsedArgs& args, const std::string& out_path, std::ostream& out,
                        std::ostream& err) {
  if (args.positional.size() < 2 || args.positional[1] != "train") {
    err << "tessera data tokenizer: the only action is train "
           "(tessera data tokenizer train --vocab_size N --out MODEL CORPUS...)\n";
    return kExitUsage;
  }
  std::vector<std::string> corpus(args.positional.begin() + 2, args.positional.end());
  if (corpus.empty()) {
    err << "tessera data tokenizer train: give at least one corpus text file\n";
    return kExitUsage;
  }
  int vocab_size = 0;
  if (!absl::SimpleAtoi(args.Get("vocab_size"), &vocab_size)) {
    err << "tessera data tokenizer train: --vocab_size N is required (N >= 260: 256 byte "
           "pieces and 3 special pieces come first)\n";
    return kExitUsage;
  }
  std::vector<std::string> helper_args = {"train", std::to_string(vocab_size), out_path};
  helper_args.insert(helper_args.end(), corpus.begin(), corpus.end());
  return RunHelper("tessera data tokenizer train", helper_args, out, err);
}

// `tessera data text`: byte-level here, SentencePiece in the helper (which
// shows its own progress and errors on our standard error).
int RunTextMode(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<TextCommandOptions> options = ParseTextCommandOptions(args);
  if (!options.ok()) {
    err << "tessera data text: " << options.status().message() << "\n";
    return kExitUsage;
  }
  if (!options->tokenizer_model.empty()) {
    if (access(options->tokenizer_model.c_str(), R_OK) != 0) {
      err << "tessera data text: cannot read the tokenizer model " << options->tokenizer_model
          << ": " << std::strerror(errno) << "\n";
      return kExitFailed;
    }
    absl::StatusOr<HelperResult> result =
        RunTokenizerHelper(TextCommandHelperArgs(args), HelperStderr::kPassThrough);
    if (!result.ok()) {
      err << "tessera data text: " << result.status().message() << "\n";
      return kExitFailed;
    }
    out << result->output;
    if (result->exit_code == kExitOk) return kExitOk;
    return result->exit_code == kExitUsage ? kExitUsage : kExitFailed;
  }
  const ByteLineEncoder bytes;
  absl::Status s = RunTextCommand(*options, bytes, out, err, isatty(STDERR_FILENO));
  if (!s.ok()) {
    err << "tessera data text: " << s.message() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

int RunDataCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const std::string& mode = args.positional[0];
  const std::string out_path = args.Get("out");
  if (out_path.empty()) {
    err << "tessera data: --out FILE is required\n";
    return kExitUsage;
  }
  if (mode == "tokenizer") return RunTokenizerCommand(args, out_path, out, err);
  if (mode == "text") return RunTextMode(args, out, err);
  if (mode == "synthetic") {
    for (const char* text_only :
         {"tokenizer", "threads", "documents", "shard-tokens", "resume", "restart"}) {
      if (args.Has(text_only)) {
        err << "tessera data synthetic: --" << text_only << " is a flag of data text"
            << (std::string(text_only) == "documents"
                    ? "; synthetic documents come from --mean-document-tokens\n"
                    : "\n");
        return kExitUsage;
      }
    }
    v1::SyntheticData task;
    std::string name = absl::AsciiStrToUpper(args.Get("task"));
    v1::SyntheticData::Task t;
    if (!v1::SyntheticData::Task_Parse(name, &t) || t == v1::SyntheticData::TASK_UNSPECIFIED) {
      err << "tessera data synthetic: --task must be addition or copy\n";
      return kExitUsage;
    }
    task.set_task(t);
    int64_t tokens = 0;
    uint64_t seed = 0;
    int max_digits = 0;
    if (!absl::SimpleAtoi(args.Get("tokens"), &tokens) || tokens <= 0) {
      err << "tessera data synthetic: --tokens must be a positive number\n";
      return kExitUsage;
    }
    if (tokens > kMaxSyntheticTokens) {  // generated in memory before writing
      err << "tessera data synthetic: --tokens must be at most " << kMaxSyntheticTokens << "\n";
      return kExitUsage;
    }
    if (args.Has("seed") && !absl::SimpleAtoi(args.Get("seed"), &seed)) {
      err << "tessera data synthetic: --seed must be a number\n";
      return kExitUsage;
    }
    if (args.Has("max-digits") && !absl::SimpleAtoi(args.Get("max-digits"), &max_digits)) {
      err << "tessera data synthetic: --max-digits must be a number\n";
      return kExitUsage;
    }
    int64_t mean_document_tokens = 0;
    if (args.Has("mean-document-tokens") &&
        (!absl::SimpleAtoi(args.Get("mean-document-tokens"), &mean_document_tokens) ||
         mean_document_tokens < 1)) {
      err << "tessera data synthetic: --mean-document-tokens must be a number >= 1\n";
      return kExitUsage;
    }
    task.set_max_digits(max_digits);
    absl::Status s = WriteSyntheticTokenFile(task, seed, tokens, out_path, mean_document_tokens);
    if (!s.ok()) {
      err << "tessera data synthetic: " << s.message() << "\n";
      return kExitFailed;
    }
    out << "wrote " << tokens << " tokens to " << out_path << "\n";
    return kExitOk;
  }
  err << "tessera data: the mode must be text, synthetic or tokenizer\n";
  return kExitUsage;
}

}  // namespace tessera

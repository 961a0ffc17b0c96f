// `tessera data text` (see text_command.h).
#include "client/text_command.h"

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/progress_meter.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

// Hands chunks to the writer and reports progress.
class ProgressSink : public EncodedChunkSink {
 public:
  ProgressSink(TokenOutputWriter* writer, ProgressMeter* meter, int64_t disk_bytes_before)
      : writer_(writer), meter_(meter), disk_bytes_before_(disk_bytes_before) {}
  absl::Status Add(const EncodedChunk& chunk) override {
    RETURN_IF_ERROR(writer_->Add(chunk));
    meter_->Update(chunk.disk_bytes_done - disk_bytes_before_);
    return absl::OkStatus();
  }

 private:
  TokenOutputWriter* writer_;
  ProgressMeter* meter_;
  const int64_t disk_bytes_before_;
};

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

absl::StatusOr<TextCommandOptions> ParseTextCommandOptions(const ParsedArgs& args) {
  TextCommandOptions options;
  options.input_names.assign(args.positional.begin() + 1, args.positional.end());
  if (options.input_names.empty()) {
    return absl::InvalidArgumentError(
        "give at least one input: a text file, a directory, a glob, or - for standard input");
  }
  // Flags of the other `data` modes mean nothing here: say so rather than
  // ignore them (e.g. --mean-document-tokens, where --documents was meant).
  for (const char* other : {"task", "tokens", "seed", "max-digits", "mean-document-tokens",
                            "vocab_size"}) {
    if (args.Has(other)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", other, " is not a flag of data text (it belongs to data ",
          std::string(other) == "vocab_size" ? "tokenizer train" : "synthetic", ")"));
    }
  }
  options.tokenizer_model = args.Get("tokenizer");
  if (args.Has("documents")) {
    ASSIGN_OR_RETURN(options.output.documents, ParseTextDocuments(args.Get("documents")));
  }
  options.threads = AvailableCores();
  if (args.Has("threads") &&
      (!absl::SimpleAtoi(args.Get("threads"), &options.threads) || options.threads < 1 ||
       options.threads > 1024)) {
    return absl::InvalidArgumentError("--threads must be a number from 1 to 1024");
  }
  TokenOutputOptions& output = options.output;
  output.path = args.Get("out");
  output.resume = args.Has("resume");
  output.restart = args.Has("restart");
  if (output.resume && output.restart) {
    return absl::InvalidArgumentError("give --resume or --restart, not both");
  }
  if (args.Has("shard-tokens") &&
      (!absl::SimpleAtoi(args.Get("shard-tokens"), &output.shard_tokens) ||
       output.shard_tokens < 1)) {
    return absl::InvalidArgumentError("--shard-tokens must be a positive number of tokens");
  }
  output.directory = absl::EndsWith(output.path, "/") || IsDirectory(output.path) ||
                     args.Has("shard-tokens") || output.resume || output.restart;
  while (output.directory && output.path.size() > 1 && absl::EndsWith(output.path, "/")) {
    output.path.pop_back();
  }
  if (output.resume) {
    for (const std::string& name : options.input_names) {
      if (name == kStandardInputName) {
        return absl::InvalidArgumentError(
            "--resume cannot continue from standard input (-): it cannot be read again");
      }
    }
  }
  return options;
}

std::vector<std::string> TextCommandHelperArgs(const ParsedArgs& args) {
  std::vector<std::string> helper = {"text"};
  for (const auto& [name, value] : args.flags) {
    helper.push_back(value == "true" && (name == "resume" || name == "restart")
                         ? absl::StrCat("--", name)
                         : absl::StrCat("--", name, "=", value));
  }
  helper.insert(helper.end(), args.positional.begin() + 1, args.positional.end());
  return helper;
}

absl::Status RunTextCommand(const TextCommandOptions& options, const LineEncoder& encoder,
                            std::ostream& out, std::ostream& progress, bool terminal) {
  ASSIGN_OR_RETURN(const std::vector<TextInput> inputs, ExpandTextInputs(options.input_names));
  ASSIGN_OR_RETURN(std::unique_ptr<TokenOutputWriter> writer,
                   TokenOutputWriter::Create(options.output, inputs, encoder.info()));
  int64_t total_disk = 0, disk_before = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].disk_bytes < 0) total_disk = -1;
    if (total_disk >= 0) total_disk += inputs[i].disk_bytes;
    if (static_cast<int64_t>(i) < writer->start().input && inputs[i].disk_bytes > 0) {
      disk_before += inputs[i].disk_bytes;
    }
  }
  if (writer->complete()) {
    out << options.output.path << " is already complete: " << writer->tokens() << " tokens in "
        << writer->shards() << " shards\n";
    return absl::OkStatus();
  }
  if (writer->resumed_shards() > 0) {
    out << "resuming " << options.output.path << " after " << writer->resumed_shards()
        << " finished shards\n";
  }
  ProgressMeter meter(progress, terminal, total_disk < 0 ? -1 : total_disk - disk_before);
  ProgressSink sink(writer.get(), &meter, disk_before);
  CorpusTokenizerOptions tokenizer_options;
  tokenizer_options.threads = options.threads;
  tokenizer_options.chunk_bytes = options.chunk_bytes;
  tokenizer_options.start = writer->start();
  const int64_t text_before = writer->text_bytes();
  absl::Status status = TokenizeCorpus(inputs, encoder, tokenizer_options, &sink);
  if (status.ok()) status = writer->Finish();
  meter.Clear();
  if (!status.ok()) return status;
  const double seconds = std::max(1e-6, meter.ElapsedSeconds());
  const int64_t text_bytes = writer->text_bytes() - text_before;
  out << "wrote " << writer->tokens() << " tokens in " << writer->documents() << " documents ("
      << TextDocumentsName(options.output.documents) << ") to " << options.output.path;
  if (options.output.directory) out << " in " << writer->shards() << " shards";
  out << " (tokenizer: " << encoder.info().ToString() << "); "
      << absl::StrFormat("%s of text from %d inputs in %.1f s: %.2f MB/s on %d threads",
                         FormatMegabytes(text_bytes), inputs.size(), seconds,
                         text_bytes / 1e6 / seconds, options.threads)
      << "\n";
  return absl::OkStatus();
}

}  // namespace tessera

// The CLI's subcommands, flags and help text (see cli_args.h).
#include "client/cli_args.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// "  --coordinator VALUE    help", help texts in one column.
std::string FlagLine(const FlagSpec& f) {
  std::string name = absl::StrCat("--", f.name, f.takes_value ? " VALUE" : "");
  name.resize(std::max<size_t>(name.size() + 2, 22), ' ');
  return absl::StrCat("  ", name, f.help, "\n");
}

}  // namespace

std::string ParsedArgs::Get(const std::string& flag, const std::string& fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : it->second;
}

std::vector<FlagSpec> CommonFlags() {
  return {
      {"coordinator", true,
       "coordinator host:port (default $TESSERA_COORDINATOR, else 127.0.0.1:50051)"},
      {"json", false, "machine-readable output: JSON (one object per line for streams)"},
      {"tls_ca", true, "PEM CA of the coordinator's certificate; TLS (default $TESSERA_TLS_CA)"},
      {"tls_cert", true, "PEM client certificate (default $TESSERA_TLS_CERT; needs --tls_key)"},
      {"tls_key", true, "PEM private key of --tls_cert (default $TESSERA_TLS_KEY)"},
      {"token_file", true,
       "file holding the bearer token (default $TESSERA_TOKEN_FILE, else $TESSERA_TOKEN)"},
      {"help", false, "show help for this command"},
  };
}

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>{
      {"submit", "submit FILE [--watch] [--dry-run]",
       "submit the job in a YAML or JSON job file (field names as in JobSpec)", 1, 1,
       {{"watch", false, "then watch the job until it ends (exit code follows its final state)"},
        {"dry-run", false,
         "only check the file and print the JobSpec it gives (YAML; JSON with --json), each\n"
         "                        rank's memory and, with --coordinator or $TESSERA_COORDINATOR, where the\n"
         "                        job would run now, whom it would preempt or what it would wait for"}}},
      {"jobs", "jobs [--state STATE] [--mine | --owner USER]",
       "list jobs, newest first, with their owners", 0, 0,
       {{"state", true, "only jobs in this state (PENDING, RUNNING, SUCCEEDED, ...)"},
        {"mine", false, "only jobs submitted with this token's user"},
        {"owner", true, "only jobs of this user"}}},
      {"status", "status ID", "show one job", 1, 1, {}},
      {"watch", "watch ID [--from-step N]",
       "follow a job to its end: a live progress bar (step, loss, tokens/s, ETA) on a terminal,\n"
       "      one line per step (at most ~50) otherwise, then a summary; --json prints every\n"
       "      event as one JSON object per line. Exits 0 only if the job SUCCEEDED", 1, 1,
       {{"from-step", true, "replay step metrics from this step (default 0)"}}},
      {"numerics", "numerics ID [--top N]",
       "show the job's newest FP8 statistics (fp8.stats_interval_steps): its worst tensors by\n"
       "      saturated, then underflowed fraction, with amax and scale (README \"Watching FP8\")",
       1, 1, {{"top", true, "show at most N tensors (default 10; 0: all)"}}},
      {"cancel", "cancel ID [--reason TEXT]", "cancel a job in any non-terminal state", 1, 1,
       {{"reason", true, "recorded in the job's terminal reason"}}},
      {"checkpoint", "checkpoint ID [--wait]",
       "commit a checkpoint of a RUNNING job at its next step boundary; the job keeps running\n"
       "      (it needs checkpoint.dir)", 1, 1,
       {{"wait", false,
         "then wait until the checkpoint is committed (exit 0) or the job leaves RUNNING"}}},
      {"suspend", "suspend ID [--reason TEXT] [--wait]",
       "checkpoint a RUNNING job at its next step boundary, then release its workers: the job\n"
       "      becomes SUSPENDED until `tessera resume` (it needs checkpoint.dir)", 1, 1,
       {{"reason", true, "recorded in the SUSPENDED state's reason"},
        {"wait", false, "then wait until the job is SUSPENDED (exit 0) or has ended"}}},
      {"resume", "resume ID",
       "queue a SUSPENDED job again; it resumes from the step it was suspended at", 1, 1, {}},
      {"delete", "delete ID",
       "forget a job that has ended (SUCCEEDED, FAILED or CANCELLED): its record and events", 1,
       1, {}},
      {"workers", "workers", "list registered worker daemons", 0, 0, {}},
      {"version", "version",
       "print this program's version and the commit it was built from (also `tessera --version`;\n"
       "      the daemons take --version too); needs no coordinator", 0, 0, {}},
      {"export",
       "export CHECKPOINT --job FILE --out DIR [--dtype bf16|fp32] [--tokenizer tok.model] "
       "[--format safetensors]",
       "write a committed checkpoint (a root: its newest step; or ROOT/step-N) as a Hugging Face\n"
       "      Llama directory (model.safetensors, config.json); needs no coordinator", 1, 1,
       {{"job", true, "the job file the checkpoint was trained with (its model and hash)"},
        {"out", true, "the directory to write"},
        {"dtype", true, "bf16 (default) or fp32"},
        {"tokenizer", true,
         "also copy this SentencePiece model (the one that made the job's token file) to "
         "DIR/tokenizer.model"},
        {"format", true, "safetensors (the only one)"}}},
      {"logs", "logs ID [--rank N] [--follow]",
       "print the job's log lines from its workers (every rank, in time order)", 1, 1,
       {{"rank", true, "only this rank's lines"},
        {"follow", false, "then print new lines as they are written, until the job ends"}}},
      {"health", "health [--service NAME]",
       "ask the server at --coordinator for its grpc.health.v1 status (a worker's address works "
       "too); prints it and exits 0 only when SERVING: for systemd and Kubernetes probes",
       0, 0, {{"service", true, "one service's status, e.g. tessera.v1.Coordinator (default: "
                                "the server as a whole)"}}},
      {"data",
       "data text [--tokenizer MODEL] [--threads N] [--documents files|blank-lines] "
       "--out FILE|DIR [--shard-tokens N] [--resume|--restart] INPUT... | data synthetic "
       "--task addition|copy --tokens N [--seed S] [--mean-document-tokens N] --out FILE | "
       "data tokenizer train --vocab_size N --out MODEL "
       "CORPUS...",
       "make token files locally (no coordinator): from text (files, directories, globs, - for\n"
       "      stdin; plain or gzip; byte-level, or with a SentencePiece BPE model, on every core),\n"
       "      or a synthetic task; or train such a BPE model",
       1, -1,
       {{"out", true, "output token file (or model file, for tokenizer train)"},
        {"tokenizer", true, "text: a SentencePiece model from `data tokenizer train` (default: bytes)"},
        {"threads", true, "text: encoding threads (default: every core)"},
        {"shard-tokens", true,
         "text: write a directory of shards of about N tokens each (default 2^28 when --out "
         "is a directory or ends in /); a shard closes where a document begins, or splits a "
         "document that alone fills N tokens of it (the rest then starts the next shard as a "
         "document of its own)"},
        {"resume", false, "text: continue the unfinished output in the --out directory"},
        {"restart", false, "text: delete earlier output in the --out directory and start again"},
        {"vocab_size", true, "tokenizer train: pieces in the model, at least 260"},
        {"task", true, "synthetic task: addition or copy"},
        {"tokens", true, "number of tokens to generate (synthetic)"},
        {"seed", true, "generator seed (synthetic, default 0)"},
        {"max-digits", true, "largest operand / string length (synthetic, default per task)"},
        {"documents", true,
         "text: where documents begin: files (one per input, default) or blank-lines"},
        {"mean-document-tokens", true,
         "synthetic: record documents of random length averaging N tokens (default: none)"}}},
  };
  return *commands;
}

const CommandSpec* FindCommand(const std::string& name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ProgramHelp() {
  std::string out =
      "tessera: submit, watch, suspend and cancel Tessera training jobs\n\n"
      "usage: tessera COMMAND [ARGS] [--coordinator HOST:PORT] [--json]\n\ncommands:\n";
  for (const CommandSpec& c : Commands()) {
    absl::StrAppend(&out, "  ", c.usage, "\n      ", c.summary, "\n");
  }
  absl::StrAppend(&out, "\nflags of every command:\n");
  for (const FlagSpec& f : CommonFlags()) {
    absl::StrAppend(&out, FlagLine(f));
  }
  absl::StrAppend(&out,
                  "\nexit codes: 0 success; 1 the coordinator refused the request or the job did "
                  "not succeed;\n  2 bad usage or job file; 3 coordinator unreachable.\n"
                  "`tessera COMMAND --help` shows a command's own flags.\n");
  return out;
}

std::string CommandHelp(const CommandSpec& command) {
  std::string out = absl::StrCat("usage: tessera ", command.usage, "\n", command.summary, "\n\nflags:\n");
  std::vector<FlagSpec> flags = command.flags;
  for (const FlagSpec& f : CommonFlags()) flags.push_back(f);
  for (const FlagSpec& f : flags) {
    absl::StrAppend(&out, FlagLine(f));
  }
  absl::StrAppend(&out, "\nexit codes: ", kExitOk, " success, ", kExitFailed,
                  " refused by the coordinator or job did not succeed, ", kExitUsage,
                  " bad usage or job file, ", kExitUnreachable, " coordinator unreachable\n");
  return out;
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& argv) {
  ParsedArgs args;
  if (argv.empty()) {
    args.help = true;
    return args;
  }
  if (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    args.help = true;
    return args;
  }
  const CommandSpec* command = FindCommand(argv[0] == "--version" ? "version" : argv[0]);
  if (command == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown command '", argv[0],
                                                   "' (try tessera --help)"));
  }
  args.command = command->name;
  std::vector<FlagSpec> flags = command->flags;
  for (const FlagSpec& f : CommonFlags()) flags.push_back(f);
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (!absl::StartsWith(a, "--") || a == "--") {
      args.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags) {
      if (f.name == name) spec = &f;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tessera ", command->name,
                                                     ": unknown flag --", name));
    }
    if (spec->takes_value && !has_value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    } else if (!spec->takes_value) {
      if (has_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      value = "true";
    }
    args.flags[name] = value;
  }
  if (args.Has("help")) {
    args.help = true;
    return args;
  }
  int n = static_cast<int>(args.positional.size());
  if (n < command->min_positional || (command->max_positional >= 0 && n > command->max_positional)) {
    return absl::InvalidArgumentError(absl::StrCat("usage: tessera ", command->usage));
  }
  return args;
}

}  // namespace tessera

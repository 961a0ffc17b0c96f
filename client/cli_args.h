// Argument parsing for the `tessera` CLI: a subcommand, positional
// arguments, and --flag / --flag=value / --flag value options. Each
// subcommand declares the flags it takes, so unknown flags are errors and
// --help can list every flag.
#ifndef TESSERA_CLIENT_CLI_ARGS_H_
#define TESSERA_CLIENT_CLI_ARGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Exit codes of the CLI.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // refused by the coordinator, or job did not succeed
inline constexpr int kExitUsage = 2;        // bad arguments or job file
inline constexpr int kExitUnreachable = 3;  // coordinator cannot be reached

struct FlagSpec {
  std::string name;         // without dashes
  bool takes_value = false; // false: a boolean switch
  std::string help;
};

struct CommandSpec {
  std::string name;
  std::string usage;        // e.g. "submit FILE [--watch]"
  std::string summary;
  int min_positional = 0;
  int max_positional = 0;   // -1: unbounded
  std::vector<FlagSpec> flags;
};

struct ParsedArgs {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;  // switches map to "true"
  bool help = false;

  bool Has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::string Get(const std::string& flag, const std::string& fallback = "") const;
};

// The flags every subcommand takes (--coordinator, --json, --help).
std::vector<FlagSpec> CommonFlags();
// The CLI's subcommands.
const std::vector<CommandSpec>& Commands();

// INVALID_ARGUMENT with a one-line reason for bad usage.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& argv);
std::string ProgramHelp();
std::string CommandHelp(const CommandSpec& command);
const CommandSpec* FindCommand(const std::string& name);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_ARGS_H_

// The `tessera` CLI as a function, so tests can run it without a process:
// parses argv (without the program name), talks to the coordinator through
// CoordinatorClient, prints to `out`/`err`, and returns the exit code
// (kExit* in cli_args.h, documented in ProgramHelp).
#ifndef TESSERA_CLIENT_CLI_H_
#define TESSERA_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/cli_args.h"

namespace tessera {

// Runs the commands that need no coordinator: `tessera data ...` and
// `tessera export ...`. Passed in rather than linked here so the rest of the
// CLI builds and tests without the data and checkpoint libraries (see
// data_command.h, export_command.h).
using DataCommand = int (*)(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// `is_tty`: whether `out` is a terminal (live progress bar vs. plain lines).
// The coordinator address is --coordinator, else $TESSERA_COORDINATOR, else
// kDefaultCoordinatorAddress.
int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           bool is_tty, DataCommand data_command = nullptr);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_H_

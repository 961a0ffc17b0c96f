// The `tessera` CLI as a function, so tests can run it without a process:
// parses argv, talks to the coordinator through CoordinatorClient, prints to
// `out`/`err`, and returns the exit code (see ProgramHelp for the codes).
#ifndef TESSERA_CLIENT_CLI_H_
#define TESSERA_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/cli_args.h"

namespace tessera {


// `is_tty`: whether `out` is a terminal (live progress bar vs. plain lines).
int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err, bool is_tty);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_H_

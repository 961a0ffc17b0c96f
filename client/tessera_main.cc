// tessera: the command-line client of the Tessera coordinator (see cli.h and
// `tessera --help` for the commands and exit codes).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/data_command.h"
#include "client/export_command.h"

namespace {

int RunOfflineCommand(const tessera::ParsedArgs& args, std::ostream& out, std::ostream& err) {
  if (args.command == "export") return tessera::RunExportCommand(args, out, err);
  return tessera::RunDataCommand(args, out, err);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tessera::RunCli(args, std::cout, std::cerr, isatty(STDOUT_FILENO) != 0,
                         &RunOfflineCommand);
}

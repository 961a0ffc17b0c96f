// tessera: the command-line client of the Tessera coordinator (see cli.h and
// `tessera --help` for the commands and exit codes).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/data_command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tessera::RunCli(args, std::cout, std::cerr, isatty(STDOUT_FILENO) != 0,
                         &tessera::RunDataCommand);
}

// tessera: the command-line client (see cli.h for the commands).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tessera::RunCli(args, std::cout, std::cerr, isatty(STDOUT_FILENO) != 0);
}

// `tessera data`: makes token files, byte-level from text files or a
// synthetic task the model can visibly learn. Runs locally; no coordinator.
#ifndef TESSERA_CLIENT_DATA_COMMAND_H_
#define TESSERA_CLIENT_DATA_COMMAND_H_

#include <ostream>

#include "client/cli_args.h"

namespace tessera {

int RunDataCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace tessera

#endif  // TESSERA_CLIENT_DATA_COMMAND_H_

// `tessera data`: makes token files from text files (byte-level, or with a
// SentencePiece BPE model) or a synthetic task the model can visibly learn,
// and trains BPE models. Runs locally; no coordinator.
#ifndef TESSERA_CLIENT_DATA_COMMAND_H_
#define TESSERA_CLIENT_DATA_COMMAND_H_

#include <ostream>

#include "client/cli_args.h"

namespace tessera {

int RunDataCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace tessera

#endif  // TESSERA_CLIENT_DATA_COMMAND_H_

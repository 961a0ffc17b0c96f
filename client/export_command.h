// `tessera export CHECKPOINT --job FILE --out DIR [--dtype bf16|fp32]
// [--tokenizer tok.model] [--format safetensors]`: a committed checkpoint as a Hugging Face Llama
// model directory (client/hf_export.h), read straight from the
// checkpoint files with no coordinator or worker. CHECKPOINT is a checkpoint
// root (its newest committed step) or one step's directory; FILE is the job
// file the checkpoint was trained with, for the model's hyperparameters (its
// hash must match the checkpoint's). --tokenizer copies the SentencePiece
// model that made the job's token file beside the weights.
#ifndef TESSERA_CLIENT_EXPORT_COMMAND_H_
#define TESSERA_CLIENT_EXPORT_COMMAND_H_

#include <ostream>

#include "client/cli_args.h"

namespace tessera {

int RunExportCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace tessera

#endif  // TESSERA_CLIENT_EXPORT_COMMAND_H_

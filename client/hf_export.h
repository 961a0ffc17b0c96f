// Exports a committed Tessera checkpoint as a Hugging Face Llama model
// directory that `transformers` loads as LlamaForCausalLM: model.safetensors
// (bf16 or fp32, from the fp32 master weights) and config.json. It reads the
// sharded checkpoint directly (formats/checkpoint_state.h), at any world
// size, with no worker or coordinator running.
//
// Names, layout and config.json fields: formats/hf_llama_layout.h.
//
// The model's hyperparameters come from the job's spec (with the
// coordinator's defaults applied), whose hash must match the checkpoint's
// manifests: weights are never written under another model's names.
#ifndef TESSERA_CLIENT_HF_EXPORT_H_
#define TESSERA_CLIENT_HF_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

enum class HfExportDType { kBFloat16, kFloat32 };

struct HfExportReport {
  int step = 0;
  int tensors = 0;
  int64_t parameters = 0;
  int64_t file_bytes = 0;  // model.safetensors
};

// `checkpoint` is a checkpoint root (the newest committed step is taken) or
// one step's directory (ROOT/step-N). Writes `out_dir`/model.safetensors and
// config.json, creating out_dir if needed (its parent must exist); files
// already there are replaced. INVALID_ARGUMENT for a spec whose shapes do
// not match the checkpoint, naming the tensor.
absl::StatusOr<HfExportReport> ExportHuggingFace(const v1::JobSpec& spec,
                                                 const std::string& checkpoint,
                                                 HfExportDType dtype, const std::string& out_dir);

// Copies the SentencePiece model `tokenizer` to `out_dir`/tokenizer.model,
// so the exported directory carries what encodes its input. It must be the
// tokenizer that made the job's training token file: FAILED_PRECONDITION
// when that file records another model (by SHA-256) or byte-level tokens
// (as synthetic data is), naming both. A token file that cannot be read or
// records no tokenizer is not checked.
absl::Status ExportTokenizer(const v1::JobSpec& spec, const std::string& tokenizer,
                             const std::string& out_dir);

}  // namespace tessera

#endif  // TESSERA_CLIENT_HF_EXPORT_H_

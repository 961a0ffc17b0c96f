// Starts a job from a Hugging Face Llama directory (model.init_from): the
// directory `tessera export` writes, or one from the Hugging Face Hub with
// the same architecture. It holds config.json and either model.safetensors
// or a sharded set named by model.safetensors.index.json.
//
// Open checks the directory against the job's model before any weight is
// read: config.json's model fields (hf_llama_layout.h) must equal the
// spec's, and every tensor the layout names must be there with its shape,
// F32, BF16 or F16. A checkpoint with tied embeddings (no lm_head.weight,
// tie_word_embeddings true) starts Tessera's separate LM head from the
// embedding. A tensor the model has no place for (biases, another
// architecture's weights) is refused rather than dropped; the rotary
// inverse-frequency buffers some older checkpoints carry are ignored (RoPE
// is computed from rope_theta). Every refusal is INVALID_ARGUMENT starting
// "model.init_from: " and naming the file, field or tensor. A directory or
// file that cannot be opened is NOT_FOUND or PERMISSION_DENIED, so a
// coordinator that does not share the workers' filesystem can leave it to
// them.
//
// Each rank then reads only its own shard of each parameter: elements
// [first, first + n) of the parameter flattened row-major, which fall in
// consecutive Hugging Face tensors.
#ifndef TESSERA_FORMATS_HF_IMPORT_H_
#define TESSERA_FORMATS_HF_IMPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/hf_llama_layout.h"
#include "formats/safetensors_reader.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

class HfLlamaSource {
 public:
  // `model` with the coordinator's defaults applied.
  static absl::StatusOr<std::unique_ptr<HfLlamaSource>> Open(const v1::ModelConfig& model,
                                                             const std::string& dir);

  // Elements [first, first + n) of Tessera parameter `tessera_name`,
  // flattened row-major, as fp32 into out[0, n). INVALID_ARGUMENT naming
  // the tensor for a value that is not finite.
  absl::Status Read(const std::string& tessera_name, int64_t first, int64_t n, float* out) const;

 private:
  struct Location {
    const SafetensorsReader* file = nullptr;
    std::string name;  // the tensor's name in `file`
  };
  HfLlamaSource() = default;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, HfLlamaParameter> layout_;  // by Tessera name
  std::map<std::string, Location> where_;           // by Hugging Face name
};

}  // namespace tessera

#endif  // TESSERA_FORMATS_HF_IMPORT_H_

// The one description of how Tessera's parameters map onto a Hugging Face
// Llama checkpoint, shared by the export (client/hf_export.h) and the import
// (hf_import.h) so the two can never disagree:
//
//   embedding                -> model.embed_tokens.weight
//   blocks.N.attn_norm       -> model.layers.N.input_layernorm.weight
//   blocks.N.qkv             -> model.layers.N.self_attn.{q,k,v}_proj.weight:
//                               rows [0, nh*hd) are q, the next nkv*hd k, then v
//   blocks.N.out_proj        -> model.layers.N.self_attn.o_proj.weight
//   blocks.N.mlp_norm        -> model.layers.N.post_attention_layernorm.weight
//   blocks.N.gate_up         -> model.layers.N.mlp.{gate,up}_proj.weight:
//                               rows [0, F) gate, [F, 2F) up
//   blocks.N.down            -> model.layers.N.mlp.down_proj.weight
//   final_norm               -> model.norm.weight
//   lm_head                  -> lm_head.weight
//
// Linear weights are [out, in] on both sides, and Tessera's RoPE rotates the
// two halves of each head (x[i] with x[i + hd/2]) as Hugging Face's
// rotate_half does, so no row of q or k is permuted. Norm weights are
// vectors ([hidden]) in Hugging Face and [hidden, 1] in Tessera.
//
// config.json: the model fields below, each with the Hugging Face
// LlamaConfig default used when a file leaves it out.
#ifndef TESSERA_FORMATS_HF_LLAMA_LAYOUT_H_
#define TESSERA_FORMATS_HF_LLAMA_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Rows [row0, row0 + rows) of a Tessera parameter, stored as one Hugging
// Face tensor.
struct HfLlamaTensor {
  std::string name;
  int64_t row0 = 0, rows = 0;
};

struct HfLlamaParameter {
  std::string tessera_name;
  int64_t rows = 0, cols = 0;
  std::vector<HfLlamaTensor> tensors;  // consecutive row ranges covering every row
};

// Every Tessera parameter of `model` in model order (the trainer's and the
// checkpoint's), with its Hugging Face tensors. INVALID_ARGUMENT for
// shapes that are incomplete or inconsistent.
absl::StatusOr<std::vector<HfLlamaParameter>> HfLlamaLayout(const v1::ModelConfig& model);

// One model field of config.json.
struct HfLlamaConfigField {
  std::string key;         // config.json key, e.g. "hidden_size"
  std::string spec_field;  // the JobSpec field it comes from, e.g. "model.d_model"
  double value = 0;        // `model`'s value
  bool is_float = false;   // written as a float (eps, theta) rather than an integer
  std::optional<double> hf_default;  // when a config.json leaves the key out
};

// The fields that define the model's weights and forward pass, from a
// spec with the coordinator's defaults applied (norm_eps, rope_theta,
// n_kv_heads filled in).
std::vector<HfLlamaConfigField> HfLlamaConfigFields(const v1::ModelConfig& model);

}  // namespace tessera

#endif  // TESSERA_FORMATS_HF_LLAMA_LAYOUT_H_

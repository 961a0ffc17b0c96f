// See hf_llama_layout.h.
#include "formats/hf_llama_layout.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::vector<HfLlamaParameter>> HfLlamaLayout(const v1::ModelConfig& m) {
  const int64_t vocab = m.vocab_size(), hidden = m.d_model(), ffn = m.ffn_dim();
  const int64_t layers = m.n_layers(), heads = m.n_heads();
  const int64_t kv_heads = m.n_kv_heads() > 0 ? m.n_kv_heads() : heads;
  if (vocab <= 0 || hidden <= 0 || ffn <= 0 || layers <= 0 || heads <= 0 ||
      hidden % heads != 0 || heads % kv_heads != 0) {
    return absl::InvalidArgumentError("model: the spec's shapes are incomplete or inconsistent");
  }
  const int64_t head_dim = hidden / heads;
  std::vector<HfLlamaParameter> out;
  auto add = [&out](std::string tessera_name, int64_t rows, int64_t cols,
                    std::vector<std::pair<std::string, int64_t>> parts) {
    HfLlamaParameter p{std::move(tessera_name), rows, cols, {}};
    int64_t row0 = 0;
    for (auto& part : parts) {
      p.tensors.push_back({std::move(part.first), row0, part.second});
      row0 += part.second;
    }
    out.push_back(std::move(p));
  };
  add("embedding", vocab, hidden, {{"model.embed_tokens.weight", vocab}});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string t = absl::StrCat("blocks.", l, ".");
    const std::string h = absl::StrCat("model.layers.", l, ".");
    add(t + "attn_norm", hidden, 1, {{h + "input_layernorm.weight", hidden}});
    add(t + "qkv", (heads + 2 * kv_heads) * head_dim, hidden,
        {{h + "self_attn.q_proj.weight", heads * head_dim},
         {h + "self_attn.k_proj.weight", kv_heads * head_dim},
         {h + "self_attn.v_proj.weight", kv_heads * head_dim}});
    add(t + "out_proj", hidden, hidden, {{h + "self_attn.o_proj.weight", hidden}});
    add(t + "mlp_norm", hidden, 1, {{h + "post_attention_layernorm.weight", hidden}});
    add(t + "gate_up", 2 * ffn, hidden,
        {{h + "mlp.gate_proj.weight", ffn}, {h + "mlp.up_proj.weight", ffn}});
    add(t + "down", hidden, ffn, {{h + "mlp.down_proj.weight", hidden}});
  }
  add("final_norm", hidden, 1, {{"model.norm.weight", hidden}});
  add("lm_head", vocab, hidden, {{"lm_head.weight", vocab}});
  return out;
}

std::vector<HfLlamaConfigField> HfLlamaConfigFields(const v1::ModelConfig& m) {
  const int heads = m.n_heads();
  const int kv_heads = m.n_kv_heads() > 0 ? m.n_kv_heads() : heads;
  const int head_dim = heads > 0 ? m.d_model() / heads : 0;
  // Hugging Face derives num_key_value_heads and head_dim from the heads
  // and width when a config leaves them out; once those fields have matched
  // (they come first), the same derivations from the spec are the defaults.
  return {
      {"vocab_size", "model.vocab_size", static_cast<double>(m.vocab_size()), false, std::nullopt},
      {"hidden_size", "model.d_model", static_cast<double>(m.d_model()), false, std::nullopt},
      {"intermediate_size", "model.ffn_dim", static_cast<double>(m.ffn_dim()), false, std::nullopt},
      {"num_hidden_layers", "model.n_layers", static_cast<double>(m.n_layers()), false,
       std::nullopt},
      {"num_attention_heads", "model.n_heads", static_cast<double>(heads), false, std::nullopt},
      {"num_key_value_heads", "model.n_kv_heads", static_cast<double>(kv_heads), false,
       static_cast<double>(heads)},
      {"head_dim", "model.d_model / model.n_heads", static_cast<double>(head_dim), false,
       static_cast<double>(head_dim)},
      {"rms_norm_eps", "model.norm_eps", static_cast<double>(m.norm_eps()), true, 1e-6},
      {"rope_theta", "model.rope_theta", static_cast<double>(m.rope_theta()), true, 10000.0},
  };
}

}  // namespace tessera

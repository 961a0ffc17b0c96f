// Model FLOPs per token and GPU peaks for MFU (see model_flops.h).
#include "server/model_flops.h"

#include "absl/strings/match.h"

namespace tessera {

double TrainingFlopsPerToken(const v1::ModelConfig& m) {
  const double d = m.d_model(), f = m.ffn_dim(), v = m.vocab_size(), s = m.seq_len();
  const double heads = m.n_heads();
  const double kv_heads = m.n_kv_heads() > 0 ? m.n_kv_heads() : heads;
  const double head_dim = heads > 0 ? d / heads : 0.0;
  // Weights of the matrix products: per block qkv, out_proj, gate_up, down;
  // then the LM head. Embedding lookups and norms are not products.
  const double block_weights = d * (heads + 2 * kv_heads) * head_dim + heads * head_dim * d +
                               d * 2 * f + f * d;
  const double weights = m.n_layers() * block_weights + v * d;
  // Causal attention: Q K^T and P V over (s + 1) / 2 keys on average, 2 FLOPs
  // per multiply-add, forward and 2x that backward.
  const double attention = m.n_layers() * 3.0 * 2.0 * 2.0 * heads * head_dim * (s + 1) / 2;
  return 6.0 * weights + attention;
}

double PeakBf16FlopsPerSecond(const std::string& name) {
  // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets.
  struct Peak {
    const char* name_part;
    double flops;
  };
  static const Peak kPeaks[] = {
      {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989e12},
      {"H200", 989e12},      {"GH200", 989e12},    {"A100", 312e12},
  };
  for (const Peak& p : kPeaks) {
    if (absl::StrContains(name, p.name_part)) return p.flops;
  }
  return 0.0;
}

}  // namespace tessera

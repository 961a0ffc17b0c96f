// A checkpoint's bytes from the JobSpec (see checkpoint_size.h), parameter
// for parameter in the order the trainer writes them.
#include "common/checkpoint_size.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/fp8_meta_layout.h"
#include "common/parallelism.h"

namespace tessera {
namespace {

// A manifest, at most: its header and checksum lines, the spec and recipe
// lines, the numerics stack line (at most 320 characters, written as hex:
// formats/checkpoint_io.h) and one line per file.
constexpr int64_t kManifestBytes = 2048;

}  // namespace

CheckpointSize EstimateCheckpointSize(const v1::JobSpec& spec) {
  const v1::ModelConfig& m = spec.model();
  const int64_t vocab = m.vocab_size(), hidden = m.d_model(), ffn = m.ffn_dim();
  const int64_t heads = m.n_heads();
  const int64_t kv_heads = m.n_kv_heads() > 0 ? m.n_kv_heads() : heads;
  const int64_t head_dim = heads > 0 ? hidden / heads : 0;
  const int64_t qkv = (heads + 2 * kv_heads) * head_dim;
  const int64_t linear_bytes = spec.fp8().disabled() ? 2 : 1;  // e4m3 or bf16 compute copy

  CheckpointSize size;
  size.writing_ranks = CheckpointRanks(spec);
  // Per rank: magic and header, then per parameter its name and shape
  // record; the elements are split over the ranks, so they count once.
  int64_t per_rank = 8 + 5 * 8;
  int64_t elements = 0;
  auto param = [&](const std::string& name, int64_t rows, int64_t cols, int64_t compute_bytes) {
    per_rank += 8 + static_cast<int64_t>(name.size()) + 5 * 8;
    elements += rows * cols * (3 * 4 + compute_bytes);  // master, Adam m and v, compute copy
    size.parameters += rows * cols;
  };
  param("embedding", vocab, hidden, 2);
  for (int l = 0; l < m.n_layers(); ++l) {
    const std::string p = absl::StrCat("blocks.", l, ".");
    param(p + "attn_norm", hidden, 1, 2);
    param(p + "qkv", qkv, hidden, linear_bytes);
    param(p + "out_proj", hidden, hidden, linear_bytes);
    param(p + "mlp_norm", hidden, 1, 2);
    param(p + "gate_up", 2 * ffn, hidden, linear_bytes);
    param(p + "down", hidden, ffn, linear_bytes);
  }
  param("final_norm", hidden, 1, 2);
  param("lm_head", vocab, hidden, 2);
  per_rank += 8 + 4 * Fp8MetaLayout::For(m.n_layers(), spec.fp8()).checkpoint_floats();
  size.state_bytes = per_rank * size.writing_ranks + elements;
  size.total_bytes = size.state_bytes + kManifestBytes * size.writing_ranks;
  return size;
}

}  // namespace tessera

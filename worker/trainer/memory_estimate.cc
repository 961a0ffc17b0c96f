// A rank's memory, from the JobSpec (see memory_estimate.h). Mirrors
// FsdpTrainer::AllocateState tensor for tensor.
#include "worker/trainer/memory_estimate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/fsdp/shard_layout.h"

namespace tessera {
namespace {

constexpr int kDefaultAmaxHistory = 16;                 // job.proto
constexpr int64_t kEngineScratchBytes = int64_t{96} << 20;  // cuBLASLt workspace and small scratch

}  // namespace

std::string FormatGiB(int64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

std::string MemoryEstimate::ToString() const {
  return absl::StrCat(FormatGiB(total()), " (parameter shards ", FormatGiB(parameter_shards),
                      ", gathered ", FormatGiB(gathered), ", activations ",
                      FormatGiB(activations), ", scratch ", FormatGiB(scratch),
                      ", engine workspace ", FormatGiB(engine_workspace), ")");
}

MemoryEstimate EstimateMemory(const v1::JobSpec& spec, int rank, int world) {
  const v1::ModelConfig& m = spec.model();
  const int64_t v = m.vocab_size(), h = m.d_model(), f = m.ffn_dim(), layers = m.n_layers();
  const int64_t heads = m.n_heads(), kv = m.n_kv_heads() > 0 ? m.n_kv_heads() : m.n_heads();
  const int64_t head_dim = heads > 0 ? h / heads : 0, qkv_width = (heads + 2 * kv) * head_dim;
  const int64_t batch = spec.data().micro_batch_size(), seq = m.seq_len(), t = batch * seq;
  const bool fp8 = !spec.fp8().disabled();
  const bool current_scaling = spec.fp8().has_current();
  const int64_t block_bytes = fp8 ? 1 : 2;  // e4m3 or bf16 block linears

  MemoryEstimate e;
  // Each parameter: its padded shard of fp32 master, m, v and gradient plus
  // the compute copy. At world size > 1 also its gathered compute weights
  // and a full-size fp32 gradient; the block ones are two sets used in turn
  // by consecutive blocks (gathered weights: one set per block unless
  // resharding).
  auto shard = [&](int64_t rows, int64_t cols, int64_t compute_bytes) {
    return ShardLayout{rows, cols, world, rank}.padded_numel() * (4 * 4 + compute_bytes);
  };
  auto gathered = [&](int64_t rows, int64_t cols, int64_t compute_bytes, int64_t copies,
                      int64_t grad_copies) {
    if (world == 1) return int64_t{0};  // views of the shards
    return ShardLayout{rows, cols, world, rank}.gathered_numel() *
           (compute_bytes * copies + 4 * grad_copies);
  };
  const int64_t block_rows[6] = {h, qkv_width, h, h, 2 * f, h};
  const int64_t block_cols[6] = {1, h, h, 1, h, f};
  const int64_t block_compute[6] = {2, block_bytes, block_bytes, 2, block_bytes, block_bytes};
  const int64_t double_buffered = std::min<int64_t>(layers, 2);
  const int64_t gathered_copies = spec.reshard_after_forward() ? double_buffered : layers;
  for (int i = 0; i < 6; ++i) {
    e.parameter_shards += layers * shard(block_rows[i], block_cols[i], block_compute[i]);
    e.gathered += gathered(block_rows[i], block_cols[i], block_compute[i], gathered_copies,
                           double_buffered);
  }
  const int64_t outer_shapes[3][2] = {{v, h}, {h, 1}, {v, h}};  // embedding, final norm, LM head
  for (const auto& [rows, cols] : outer_shapes) {
    e.parameter_shards += shard(rows, cols, 2);
    e.gathered += gathered(rows, cols, 2, 1, 1);
  }

  // FP8 metadata: amaxes, scales, 1/scales and histories of 2n e4m3 and n
  // e5m2 slots, plus n weight-data 1/scales (worker/model/fp8_meta.cc).
  const int64_t n = 4 * layers;
  const int64_t history = current_scaling ? 1
                          : spec.fp8().delayed().amax_history_len() > 0
                              ? spec.fp8().delayed().amax_history_len()
                              : kDefaultAmaxHistory;
  e.scratch += 4 * ((2 * n + n) + 2 * n * (2 + history) + n * (2 + history) + n);

  // Activations saved for backward, per layer (FsdpTrainer::BlockActivations).
  const bool fused_swiglu = fp8 && !current_scaling;
  int64_t per_layer = t * h * 4 + t * 4 + t * h * 2 + t * qkv_width * 2 + t * h * 2 +
                      batch * heads * seq * 4 + t * h * 4 + t * 4 + t * h * 2 + t * 2 * f * 2;
  if (!fused_swiglu) per_layer += t * f * 2;
  if (fp8) per_layer += (h + h + h + f) * t;  // the four linears' FP8 transposed inputs
  e.activations = per_layer * layers;

  // Per-step buffers (FsdpTrainer::AllocateState, LinearScratch).
  const int64_t max_in = std::max(h, f), max_out = std::max(qkv_width, 2 * f);
  e.scratch += t * max_in + 2 * t * max_out + max_in * max_out;            // FP8 scratch
  e.scratch += 2 * t * 4 + t * h * 4 + t * 4 + t * h * 2 + t * h * 2 +  // ids, x_final, ...
               t * h * 2 + t * h * 4 + t * max_out * 2 + t * max_in * 2 + t * qkv_width * 2 +
               8 * 4;

  // The engine's own: one chunk of the fused loss's logits (at most 4 bytes
  // each), the attention backward's fp32 scratch, and fixed workspaces.
  const int64_t chunk = std::min<int64_t>(spec.loss_chunk_tokens() > 0 ? spec.loss_chunk_tokens() : t, t);
  e.engine_workspace = chunk * v * 4 + 2 * batch * heads * seq * 4 + kEngineScratchBytes;
  return e;
}

}  // namespace tessera

// One rank's memory from the JobSpec (see memory_estimate.h), tensor for
// tensor in the order FsdpTrainer::AllocateState allocates them.
#include "common/memory_estimate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/block_buffer_ring.h"
#include "common/fp8_meta_layout.h"

namespace tessera {
namespace {

constexpr int64_t kEngineScratchBytes = int64_t{96} << 20;  // cuBLASLt workspace, small scratch

// Dim-0 sharding (worker/fsdp/shard_layout.h): every rank holds one chunk of
// ceil(rows / world) rows, padded, so the sizes are the same on every rank.
int64_t PaddedChunk(int64_t rows, int64_t cols, int world) {
  return (rows + world - 1) / world * cols;
}

}  // namespace

std::string FormatBytesAsGiB(int64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

bool EmbeddingGradientFromRows(int shard_world, int64_t tokens, int64_t vocab) {
  return shard_world > 1 && shard_world * tokens < vocab;
}

bool RecomputesBlock(const v1::MemoryConfig& memory, int64_t layer) {
  const v1::MemoryConfig::Recompute policy = memory.recompute();
  if (policy != v1::MemoryConfig::BLOCKS && policy != v1::MemoryConfig::SELECTIVE) return false;
  return layer % std::max(memory.every_n_blocks(), 1) == 0;
}

std::string RankMemoryEstimate::ToString() const {
  const std::string without =
      activations_without_recompute > activations
          ? absl::StrCat(" (", FormatBytesAsGiB(activations_without_recompute),
                         " without recomputation)")
          : "";
  return absl::StrCat(FormatBytesAsGiB(total()), " (parameter shards ",
                      FormatBytesAsGiB(parameter_shards), ", gathered ",
                      FormatBytesAsGiB(gathered), ", activations ", FormatBytesAsGiB(activations),
                      without, ", scratch ", FormatBytesAsGiB(scratch), ", engine workspace ",
                      FormatBytesAsGiB(engine_workspace), ")");
}

RankMemoryEstimate EstimateRankMemory(const v1::JobSpec& spec, int /*rank*/, int shard_world,
                                      int ring_depth) {
  const int world = std::max(shard_world, 1);
  const v1::ModelConfig& m = spec.model();
  const int64_t vocab = m.vocab_size(), hidden = m.d_model(), ffn = m.ffn_dim();
  const int64_t layers = m.n_layers(), heads = m.n_heads();
  const int64_t kv_heads = m.n_kv_heads() > 0 ? m.n_kv_heads() : heads;
  const int64_t head_dim = heads > 0 ? hidden / heads : 0;
  const int64_t qkv = (heads + 2 * kv_heads) * head_dim;
  const int64_t batch = spec.data().micro_batch_size(), seq = m.seq_len();
  const int64_t tokens = batch * seq;
  const bool fp8 = !spec.fp8().disabled();
  const bool current_scaling = spec.fp8().has_current();
  const int64_t linear_bytes = fp8 ? 1 : 2;  // e4m3 or bf16 compute copy of the block linears

  RankMemoryEstimate e;
  // Shard: fp32 master, m, v and gradient (16 bytes) plus the compute copy.
  auto shard_bytes = [&](int64_t rows, int64_t cols, int64_t compute_bytes) {
    return PaddedChunk(rows, cols, world) * (16 + compute_bytes);
  };
  // Gathered: `copies` compute copies and `grad_copies` fp32 full gradients.
  auto gathered_bytes = [&](int64_t rows, int64_t cols, int64_t compute_bytes, int64_t copies,
                            int64_t grad_copies) -> int64_t {
    if (world == 1) return 0;
    return PaddedChunk(rows, cols, world) * world * (compute_bytes * copies + 4 * grad_copies);
  };
  // Per block: attention norm, QKV, output projection, MLP norm, gate+up, down.
  const int64_t rows[6] = {hidden, qkv, hidden, hidden, 2 * ffn, hidden};
  const int64_t cols[6] = {1, hidden, hidden, 1, hidden, ffn};
  const int64_t compute[6] = {2, linear_bytes, linear_bytes, 2, linear_bytes, linear_bytes};
  // The sets of gathered weights and of full gradients (block_buffer_ring.h).
  const int64_t grad_sets = BlockBufferRing::Shared(layers, ring_depth).sets();
  const int64_t weight_sets = spec.reshard_after_forward()
                                  ? grad_sets
                                  : BlockBufferRing::OnePerBlock(layers, ring_depth).sets();
  for (int i = 0; i < 6; ++i) {
    e.parameter_shards += layers * shard_bytes(rows[i], cols[i], compute[i]);
    e.gathered += gathered_bytes(rows[i], cols[i], compute[i], weight_sets, grad_sets);
  }
  // Embedding, final norm, LM head: bf16 compute copies, one set each, and
  // full gradients, but for the embedding's where it is built in its shard
  // from every rank's token ids and [T, H] fp32 residual-gradient rows
  // (EmbeddingGradientFromRows).
  const int64_t outer[3][2] = {{vocab, hidden}, {hidden, 1}, {vocab, hidden}};
  const bool embedding_from_rows = EmbeddingGradientFromRows(world, tokens, vocab);
  for (int i = 0; i < 3; ++i) {
    e.parameter_shards += shard_bytes(outer[i][0], outer[i][1], 2);
    e.gathered +=
        gathered_bytes(outer[i][0], outer[i][1], 2, 1, i == 0 && embedding_from_rows ? 0 : 1);
  }
  if (embedding_from_rows) e.gathered += world * tokens * 4 + world * tokens * hidden * 4;

  // FP8 metadata (common/fp8_meta_layout.h), twice: the block itself, and
  // the copy a forward pass outside the step (validation, ForwardLogits)
  // restores it from.
  e.scratch += 2 * 4 * Fp8MetaLayout::For(static_cast<int>(layers), spec.fp8()).engine_floats();

  // Saved for backward, per layer: residual input (fp32), the two norms'
  // 1/rms, QKV, attention output and its softmax statistics, the residual
  // after attention, gate+up; unless the norms and the SwiGLU write FP8
  // directly (FP8 with delayed scaling), the norms' bf16 outputs and the
  // SwiGLU's; with FP8, each linear's transposed e4m3 input.
  const bool fused_fp8_casts = fp8 && !current_scaling;
  // FP8 statistics (fp8.stats_interval_steps; worker/trainer/fp8_step_stats.h):
  // two int64 counts and two floats per FP8 tensor (3 per block linear),
  // and with fused casts the bf16 [T, max(H, 2F)] they are measured from.
  if (fp8 && spec.fp8().stats_interval_steps() > 0) {
    e.scratch += layers * 4 * 3 * (2 * 8 + 2 * 4);
    if (fused_fp8_casts) e.scratch += tokens * std::max(hidden, 2 * ffn) * 2;
  }
  // What a block's backward reads that is the output of a GEMM or of
  // attention (QKV, attention output and statistics, the residual after
  // attention, gate+up), the block's input, and the cheap rest.
  const int64_t block_input = tokens * hidden * 4;
  const int64_t expensive = tokens * qkv * 2 + tokens * hidden * 2 + batch * heads * seq * 4 +
                            tokens * hidden * 4 + tokens * 2 * ffn * 2;
  int64_t cheap = 2 * tokens * 4;
  if (!fused_fp8_casts) cheap += 2 * tokens * hidden * 2 + tokens * ffn * 2;
  if (fp8) cheap += (hidden + hidden + hidden + ffn) * tokens;
  const int64_t per_layer = block_input + expensive + cheap;
  e.activations_without_recompute = per_layer * layers;
  // Recomputation (MemoryConfig): a recomputed block keeps its input (and
  // under SELECTIVE the expensive outputs); the rest of it lives in one set
  // all recomputed blocks share.
  int64_t recomputed = 0;
  for (int64_t l = 0; l < layers; ++l) recomputed += RecomputesBlock(spec.memory(), l) ? 1 : 0;
  const int64_t kept = spec.memory().recompute() == v1::MemoryConfig::SELECTIVE
                           ? block_input + expensive
                           : block_input;
  e.activations = (layers - recomputed) * per_layer + recomputed * kept +
                  (recomputed > 0 ? per_layer - kept : 0);

  // Per-step buffers: FP8 operand scratch, then token ids and targets (and
  // under document masking their document starts), the
  // final hidden state and its norm, the gradient buffers, the widest
  // input and output buffers, the step's scalars and its Adam step values.
  const int64_t widest_in = std::max(hidden, ffn), widest_out = std::max(qkv, 2 * ffn);
  e.scratch += tokens * widest_in + 2 * tokens * widest_out + widest_in * widest_out;
  e.scratch += 2 * tokens * 4 + tokens * hidden * 4 + tokens * 4 + tokens * hidden * 2 +
               tokens * hidden * 2 + tokens * hidden * 4 +
               tokens * widest_out * 2 + tokens * widest_in * 2 + tokens * qkv * 2 + 8 * 4 + 3 * 4;
  if (spec.data().document_masking()) e.scratch += tokens * 4;  // attention's doc_starts
  // The bf16 shadow loss (worker/trainer/shadow_loss.cc): one block's four
  // linears in bf16, full size, and at world size > 1 this rank's bf16
  // shards of them; its four sums.
  if (fp8 && spec.fp8().shadow_interval_steps() > 0) {
    for (const int i : {1, 2, 4, 5}) {
      const int64_t chunk = PaddedChunk(rows[i], cols[i], world);
      e.gathered += chunk * world * 2 + (world > 1 ? chunk * 2 : 0);
    }
    e.scratch += 4 * 4;
  }

  // The engine: one chunk of logits (at most 4 bytes each), the attention
  // backward's scratch (TesseraAttentionWorkspaceOfJob on CUDA; the CPU
  // engine's fp32 D and lse per head and query and an int32 document start
  // per query), the embedding backward's sorted token ids and fp32 partial
  // rows (two per 64 sorted tokens, worker/engine/cuda/embedding.cu), fixed
  // workspaces.
  const int64_t chunk = std::min<int64_t>(
      spec.loss_chunk_tokens() > 0 ? spec.loss_chunk_tokens() : tokens, tokens);
  const int64_t embedding_tokens = embedding_from_rows ? world * tokens : tokens;
  const int64_t embedding_backward =
      16 * embedding_tokens + (embedding_tokens + 63) / 64 * 2 * hidden * 4;
  e.engine_workspace = chunk * vocab * 4 + embedding_backward + kEngineScratchBytes;
  const JobAttention attention = AttentionOfJob(spec);
  e.engine_workspace += attention.cuda ? TesseraAttentionWorkspaceOfJob(attention)
                                       : (2 * heads + 1) * batch * seq * 4;
  // cuDNN's attention, where the engine will run it.
  if (attention.cudnn) {
    e.engine_workspace += CudnnWorkspaceOfJob(attention, attention.deterministic);
  }
  return e;
}

int64_t TesseraAttentionWorkspaceOfJob(const JobAttention& attention) {
  if (!attention.cuda) return 0;
  const CudnnAttentionShape& a = attention.shape;
  const int64_t seq_pad = (a.seq + 127) / 128 * 128;
  int64_t floats = (2 * a.heads + 1) * a.batch * seq_pad;  // D, lse2, document starts
  if (a.head_dim == 64 || a.head_dim == 128) {  // the one pass's head dims
    // dQ sums; turn counters and completion queue; the queue's length (4);
    // the tiles' first blocks.
    floats += a.heads * a.batch * seq_pad * a.head_dim +
              (2 * a.heads + 1) * a.batch * (seq_pad / 64) + 4;
  }
  return floats * 4;
}

int64_t CudnnWorkspaceOfJob(const JobAttention& attention, bool deterministic) {
  return attention.documents ? CudnnDocumentsWorkspaceLimit(attention.shape, deterministic)
                             : CudnnAttentionWorkspaceBound(attention.shape, deterministic,
                                                            attention.key_bands);
}

JobAttention AttentionOfJob(const v1::JobSpec& spec) {
  const v1::ModelConfig& m = spec.model();
  const int64_t heads = m.n_heads();
  JobAttention a;
  a.cuda = spec.device_kind() == v1::CUDA;
  a.documents = spec.data().document_masking();
  a.shape = {spec.data().micro_batch_size(), heads, m.n_kv_heads() > 0 ? m.n_kv_heads() : heads,
             m.seq_len(), heads > 0 ? m.d_model() / heads : 0};
  a.deterministic = !spec.nondeterministic_attention_backward();
  a.key_bands = a.documents ? 1 : CudnnKeyBands(a.shape);
  a.cudnn = a.cuda &&
            (spec.attention_kernels() == v1::ATTENTION_KERNELS_CUDNN ||
             (spec.attention_kernels() == v1::ATTENTION_KERNELS_AUTO &&
              AutoAttentionPicksCudnn(a.deterministic)));
  return a;
}

}  // namespace tessera

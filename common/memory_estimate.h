// How much memory one rank of a job will allocate, computed from the JobSpec
// alone. It lives in common/ so both sides use one formula: the coordinator
// refuses at submit time a job that no registered worker of its kind could
// hold (server/memory_admission.h), and the worker refuses it again in
// SetupJob, against the device's free memory, before allocating anything.
//
// The trainer's tensors are counted exactly (FsdpTrainer::AllocateState):
// each parameter's padded dim-0 shard (fp32 master, Adam m and v, fp32
// gradient, compute copy); at a shard world size above 1 the gathered
// weights and full-size gradients (at 1 they are views of the shards); the
// activations saved for backward; per-step scratch; FP8 metadata. The
// engine's own workspace (one chunk of the fused loss's logits, attention
// and embedding backward scratch, fixed cuBLASLt workspace) is an upper
// bound on top.
// worker/trainer/fsdp_trainer_test holds this estimate to the bytes the
// trainer really allocates.
#ifndef TESSERA_COMMON_MEMORY_ESTIMATE_H_
#define TESSERA_COMMON_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "common/block_buffer_ring.h"
#include "common/cudnn_attention_workspace.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

struct RankMemoryEstimate {
  int64_t parameter_shards = 0;  // master, m, v, gradient and compute shards
  int64_t gathered = 0;          // gathered weights and full-size gradients
  int64_t activations = 0;       // saved for backward, all layers
  // What `activations` would be without memory.recompute (equal to it when
  // nothing is recomputed); not part of the totals.
  int64_t activations_without_recompute = 0;
  int64_t scratch = 0;           // per-step buffers and FP8 metadata
  int64_t engine_workspace = 0;  // upper bound of the engine's own buffers

  // What the trainer allocates through the ops interface.
  int64_t trainer_bytes() const { return parameter_shards + gathered + activations + scratch; }
  int64_t total() const { return trainer_bytes() + engine_workspace; }
  // "12.30 GiB (parameter shards 2.10 GiB, gathered ..., ...)".
  std::string ToString() const;
};

// "12.34 GiB".
std::string FormatBytesAsGiB(int64_t bytes);

// Whether block `layer` recomputes under `memory` (job.proto's
// MemoryConfig): blocks 0, n, 2n, ... for every_n_blocks n (0 means 1),
// none when the policy is NONE or unset. The trainer and this estimate
// both decide by it.
bool RecomputesBlock(const v1::MemoryConfig& memory, int64_t layer);

// Whether a sharded rank builds the embedding's gradient in its shard from
// every rank's tokens and [T, H] residual-gradient rows, all-gathered
// (true), or reduce-scatters a full [V, H] gradient (false): the gather when
// the shard group's tokens are fewer than the vocabulary's rows
// (shard_world * tokens < vocab), where it moves less (a rank receives
// (world - 1) * T rows against (world - 1) / world * V) and needs no
// [V, H] buffer. Measured on 2 x H200 (bench/RESULTS.md): the Llama-3-8B
// shape's final wait fell from 5.69 to 2.42 ms; at 221M, where the two are
// equal, the gather was 0.65 ms slower. The trainer and this estimate both
// decide by it.
bool EmbeddingGradientFromRows(int shard_world, int64_t tokens, int64_t vocab);

// The attention a job's CUDA engine runs in each block, decided as the
// engine decides (JobSpec.attention_kernels, AutoAttentionPicksCudnn), for
// the estimate and for the dry run's account of it.
struct JobAttention {
  bool cuda = false;                 // device_kind CUDA (the CPU engine has one attention)
  bool documents = false;            // data.document_masking: cuDNN's ragged batches where they fit
  CudnnAttentionShape shape;         // one block's call: micro-batch, heads, sequence
  bool deterministic = true;         // !nondeterministic_attention_backward
  int key_bands = 1;                 // the deterministic backward's (CudnnKeyBands; 1 for documents)
  bool cudnn = false;                // cuDNN runs it (its workspace counts)
};
JobAttention AttentionOfJob(const v1::JobSpec& spec);
// The cuDNN workspace counted for such a job's attention with the given
// backward form: the documents' limit under document masking, else the
// whole sequences' bound, in the key bands the engine runs
// (common/cudnn_attention_workspace.h).
int64_t CudnnWorkspaceOfJob(const JobAttention& attention, bool deterministic);
// The scratch Tessera's attention backward asks the CUDA engine for
// (worker/engine/cuda/kernels.h, FlashAttentionBackwardScratchFloats under
// the one-pass forms), per query padded to 128: fp32 D and lse per head, an
// int32 document start; at head dims 64 and 128 the one pass's fp32 dQ
// sums per head, an int32 turn per head and 64-query tile, and the tiles'
// first key blocks. 0 for CPU jobs. Counted on every CUDA job, even where
// cuDNN is chosen (the engine falls back to it where cuDNN does not start);
// worker/engine/cuda/attention_workspace_test holds it to the engine's
// request.
int64_t TesseraAttentionWorkspaceOfJob(const JobAttention& attention);

// Rank `rank` of a shard group of `shard_world` ranks (common/parallelism.h:
// the whole world_size for plain FSDP), for a spec that passed validation
// and carries the coordinator's defaults. `ring_depth` is the trainer's
// buffer ring depth (block_buffer_ring.h).
RankMemoryEstimate EstimateRankMemory(const v1::JobSpec& spec, int rank, int shard_world,
                                      int ring_depth = BlockBufferRing::kDefaultDepth);

}  // namespace tessera

#endif  // TESSERA_COMMON_MEMORY_ESTIMATE_H_

// The bf16 shadow loss (Fp8Recipe.shadow_interval_steps): after every N-th
// step, two forward passes over one fixed held-out batch with the weights
// the step left, first the FP8 model as it trains, then the same model with
// its block linears in bf16, cast from the fp32 masters. Their loss gap is
// what FP8 costs this model now; a gap that grows is FP8 diverging from the
// run bf16 would have made.
//
// Both forwards run only the first fp8.shadow_batch_sequences sequences of
// the held-out micro-batch (by default 2), through the leading rows of the
// step's activation buffers (BlockForward and ForwardToFinalNorm take their
// sizes from the batch passed), so a shadow costs a fraction of a step's
// forward. The gap is then measured on fewer tokens.
//
// The held-out batch is read once, at Setup, and kept on the host: this
// rank's share of the first validation batch when the job has
// data.validation (so the FP8 loss is the one Evaluate reports with
// eval_batches 1), else the first batch of the training data opened again
// with a different seed (kHeldOutSeedSalt), which leaves the training
// reader untouched.
//
// The bf16 block weights: each block's four linears, cast from the master
// shards into bf16 shards and all-gathered (at world size 1 cast straight
// into the full buffers), one set shared by every block and allocated at
// Setup only when the shadow is on. A bf16 job (fp8.disabled) makes its
// compute shards from the masters with the same cast, so the shadow is the
// loss that job would report with these masters. The norms, embedding and
// LM head are bf16 in both models and are used as gathered for the step.
//
// Like Evaluate, it writes no parameter, gradient, Adam or data state; the
// packed FP8 state the FP8 forward moves is copied aside and back
// (BeginForwardPass / EndForwardPass); the activations and scratch it
// writes are rewritten by the next step before they are read. It runs after
// the step, eagerly on the step's stream, never inside a captured step, so
// a one-rank CUDA job's step graph is replayed unchanged. Every rank runs
// it (its all-gathers and one all-reduce are collectives); the losses are
// global.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/phase_range.h"

namespace tessera {
namespace {

// Slots of shadow_scalars_: each forward's loss sum and valid tokens.
constexpr int kFp8LossSum = 0, kFp8Tokens = 1, kBf16LossSum = 2, kBf16Tokens = 3;

// The training data's seed is XORed with this to draw the held-out batch
// when the job has no validation data.
constexpr uint64_t kHeldOutSeedSalt = 0x5AD0'5AD0'5AD0'5AD0ull;

TensorDesc FirstElements(const DeviceTensor& t, DType dtype, int64_t n) {
  TensorDesc d = t.desc;
  d.dtype = dtype;
  d.shape = Shape{n};
  return d;
}

TensorDesc Full(const DeviceTensor& gathered, const Fp8ShardedParam& p) {
  TensorDesc d = gathered.desc;
  d.shape = p.cols == 1 ? Shape{p.rows} : Shape{p.rows, p.cols};
  return d;
}

}  // namespace

bool FsdpTrainer::ShadowLossAfterStep(int step) const {
  const int interval = spec_.fp8().shadow_interval_steps();
  return interval > 0 && fp8_ && (step + 1) % interval == 0;
}

absl::Status FsdpTrainer::SetupShadowLoss() {
  if (spec_.fp8().shadow_interval_steps() <= 0 || !fp8_) return absl::OkStatus();
  const int requested = spec_.fp8().shadow_batch_sequences();
  if (requested < 0 || requested > batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8.shadow_batch_sequences: must be in [0, data.micro_batch_size ", batch_,
                     "], got ", requested));
  }
  shadow_sequences_ = ShadowBatchSequences(requested, static_cast<int>(batch_));
  for (const BlockLinear linear : kEveryBlockLinear) {
    const Fp8ShardedParam& p = blocks_[0].linear(linear);
    ASSIGN_OR_RETURN(shadow_weights_[linear],
                     Alloc(DType::kBFloat16, Shape{p.layout.gathered_numel()}));
    if (world_ > 1) {
      ASSIGN_OR_RETURN(shadow_shards_[linear],
                       Alloc(DType::kBFloat16, Shape{p.layout.padded_numel()}));
    }
  }
  ASSIGN_OR_RETURN(shadow_scalars_, Alloc(DType::kFloat32, Shape{4}));

  host_shadow_inputs_.resize(tokens_);
  host_shadow_targets_.resize(tokens_);
  if (spec_.data().document_masking()) host_shadow_doc_starts_.resize(tokens_);
  const auto inputs = absl::MakeSpan(host_shadow_inputs_);
  const auto targets = absl::MakeSpan(host_shadow_targets_);
  const auto doc_starts = absl::MakeSpan(host_shadow_doc_starts_);
  if (!validation_sets_.empty()) {
    return validation_sets_[0].batches->ReadBatch(0, inputs, targets, doc_starts);
  }
  v1::JobSpec held_out = spec_;
  held_out.set_seed(spec_.seed() ^ kHeldOutSeedSalt);
  ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> source,
                   OpenBatchSource(held_out, global_rank_, global_world_));
  return source->ReadBatch(0, inputs, targets, doc_starts);
}

absl::Status FsdpTrainer::GatherShadowBlock(int layer) {
  Ops& ops = *ops_;
  Block& b = blocks_[layer];
  // bf16 copies of the block linears' masters: this rank's shard, or at
  // world size 1 the whole weight, straight into the full buffer.
  for (const BlockLinear linear : kEveryBlockLinear) {
    const Fp8ShardedParam& p = b.linear(linear);
    const int64_t n = p.layout.shard_numel();
    if (n == 0) continue;
    const DeviceTensor& out = world_ > 1 ? shadow_shards_[linear] : shadow_weights_[linear];
    RETURN_IF_ERROR(ops.Cast(FirstElements(p.master, DType::kFloat32, n),
                             FirstElements(out, DType::kBFloat16, n), stream_));
  }
  if (world_ == 1) return absl::OkStatus();
  // One grouped all-gather: the two norms as the step gathers them, and the
  // four bf16 linears.
  GatheredBlock& norms = GatheredFor(layer);
  absl::InlinedVector<AllGatherPart, 6> parts;
  ASSIGN_OR_RETURN(AllGatherPart attn_norm, GatherPart(b.attn_norm, world_, norms.attn_norm.desc));
  ASSIGN_OR_RETURN(AllGatherPart mlp_norm, GatherPart(b.mlp_norm, world_, norms.mlp_norm.desc));
  parts.push_back(attn_norm);
  parts.push_back(mlp_norm);
  for (const BlockLinear linear : kEveryBlockLinear) {
    const Fp8ShardedParam& p = b.linear(linear);
    parts.push_back(AllGatherPart{shadow_shards_[linear].desc.data,
                                  shadow_weights_[linear].desc.data,
                                  static_cast<size_t>(p.layout.padded_numel()) * 2});
  }
  ASSIGN_OR_RETURN(const CollectiveTicket gathered, comm_->StartAllGather(parts, stream_));
  return comm_->WaitFor(gathered, stream_);
}

// BlockForward with bf16 block linears, as a bf16 job runs it: norm, bf16
// GEMM, RoPE, attention, GEMM adding the residual; norm, GEMM, SwiGLU, GEMM
// adding the residual. The bf16 norm outputs and SwiGLU output go into the
// backward's bf16 scratch (grad_bf16_a_ is at least [T, H], grad_bf16_b_
// at least [T, F]), which the next step writes before it reads.
absl::Status FsdpTrainer::ShadowBlockForward(int l, BlockActivations& a, const TensorDesc& x_in,
                                             const TensorDesc& x_out) {
  Ops& ops = *ops_;
  Block& b = blocks_[l];
  const GatheredBlock& w = GatheredFor(l);
  const float eps = spec_.model().norm_eps();
  // The sequences x_in holds, through the leading rows of each buffer.
  const int64_t t = x_in.shape[0], batch = t / seq_;
  const auto tokens = [&](const DeviceTensor& d) { return LeadingRows(d.desc, t); };
  const TensorDesc qkv = LeadingRows(a.qkv.desc, batch), attn = tokens(a.attn);
  const TensorDesc x_mid = tokens(a.x_mid), gate_up = tokens(a.gate_up);
  const auto bf16 = [&](BlockLinear linear) {
    LinearSpec s = Spec(l, linear, t);
    s.fp8 = false;
    return s;
  };
  const auto weight = [&](BlockLinear linear) {
    const Fp8ShardedParam& p = b.linear(linear);
    TensorDesc d = shadow_weights_[linear].desc;
    d.shape = Shape{p.rows, p.cols};
    return d;
  };
  TensorDesc normed = grad_bf16_a_.desc;
  normed.shape = Shape{t, hidden_};
  TensorDesc swiglu = grad_bf16_b_.desc;
  swiglu.shape = Shape{t, ffn_};
  // Attention: x_mid = x_in + out_proj(attention(rope(qkv(norm(x_in))))).
  RETURN_IF_ERROR(ops.RmsNormForward(x_in, Full(w.attn_norm, b.attn_norm), eps, normed,
                                     tokens(a.rstd1), stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, bf16(BlockLinear::kQkv), weight(BlockLinear::kQkv),
                                normed, Reshaped(qkv, Shape{t, qkv_width_}), scratch_,
                                a.saved[BlockLinear::kQkv], stream_));
  RETURN_IF_ERROR(ops.RopeForward(qkv, kv_heads_, spec_.model().rope_theta(), stream_));
  RETURN_IF_ERROR(ops.AttentionForward(qkv, kv_heads_, BatchDocuments(batch),
                                       Reshaped(attn, Shape{batch, seq_, heads_, head_dim_}),
                                       LeadingRows(a.lse.desc, batch), stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, bf16(BlockLinear::kOutProj),
                                weight(BlockLinear::kOutProj), attn, x_mid, scratch_,
                                a.saved[BlockLinear::kOutProj], stream_, &x_in));
  // MLP: x_out = x_mid + down(swiglu(gate_up(norm(x_mid)))).
  RETURN_IF_ERROR(ops.RmsNormForward(x_mid, Full(w.mlp_norm, b.mlp_norm), eps, normed,
                                     tokens(a.rstd2), stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, bf16(BlockLinear::kGateUp),
                                weight(BlockLinear::kGateUp), normed, gate_up, scratch_,
                                a.saved[BlockLinear::kGateUp], stream_));
  RETURN_IF_ERROR(ops.SwiGluForward(gate_up, swiglu, stream_));
  return LinearForward(ops, *meta_, bf16(BlockLinear::kDown), weight(BlockLinear::kDown), swiglu,
                       x_out, scratch_, a.saved[BlockLinear::kDown], stream_, &x_mid);
}

absl::StatusOr<ShadowReport> FsdpTrainer::RunShadowLoss() {
  const auto started = std::chrono::steady_clock::now();
  PhaseRange range("shadow-loss");
  Ops& ops = *ops_;
  float* sums = shadow_scalars_.data<float>();
  // The first shadow_sequences_ sequences of the held-out batch, in the
  // leading rows of every buffer the forwards use.
  const int64_t t = shadow_sequences_ * seq_;
  const auto tokens = [&](const DeviceTensor& d) { return LeadingRows(d.desc, t); };
  RETURN_IF_ERROR(ops.Memset(sums, 0, 4 * sizeof(float), stream_));
  RETURN_IF_ERROR(BeginForwardPass());
  // The held-out batch, read by both forwards.
  RETURN_IF_ERROR(ops.CopyToDevice(inputs_.desc.data, host_shadow_inputs_.data(), t * 4, stream_));
  RETURN_IF_ERROR(
      ops.CopyToDevice(targets_.desc.data, host_shadow_targets_.data(), t * 4, stream_));
  if (spec_.data().document_masking()) {
    RETURN_IF_ERROR(
        CopyDocStartsToDevice(absl::MakeConstSpan(host_shadow_doc_starts_.data(), t)));
  }
  const auto loss_into = [&](int loss_slot, int tokens_slot) {
    return ops.FusedLinearCrossEntropy(
        tokens(h_final_), Full(gathered_lm_head_, lm_head_), tokens(targets_), kIgnoreIndex,
        spec_.loss_chunk_tokens(), sums + loss_slot, sums + tokens_slot,
        /*grad_x=*/TensorDesc{}, /*grad_weight=*/TensorDesc{},  // loss only
        /*accumulate_grad_weight=*/false, stream_);
  };

  // ---- The model as it trains: FP8 block linears ---------------------------
  RETURN_IF_ERROR(ForwardToFinalNorm(shadow_sequences_));
  RETURN_IF_ERROR(loss_into(kFp8LossSum, kFp8Tokens));

  // ---- The shadow: bf16 block linears from the fp32 masters -----------------
  RETURN_IF_ERROR(CheckAborted());
  RETURN_IF_ERROR(ops.EmbeddingForward(tokens(inputs_), Full(gathered_embedding_, embedding_),
                                       tokens(acts_[0].x_in), stream_));
  for (int l = 0; l < layers_; ++l) {
    RETURN_IF_ERROR(GatherShadowBlock(l));
    const TensorDesc x_out = tokens(l + 1 < layers_ ? acts_[l + 1].x_in : x_final_);
    RETURN_IF_ERROR(ShadowBlockForward(l, acts_[l], tokens(acts_[l].x_in), x_out));
  }
  RETURN_IF_ERROR(ops.RmsNormForward(tokens(x_final_), Full(gathered_final_norm_, final_norm_),
                                     spec_.model().norm_eps(), tokens(h_final_),
                                     tokens(rstd_final_), stream_));
  RETURN_IF_ERROR(loss_into(kBf16LossSum, kBf16Tokens));

  // ---- Global sums: one all-reduce (and across replicas under HSDP) --------
  RETURN_IF_ERROR(CheckAborted());
  const TensorDesc all_sums = MakeTensor(sums, DType::kFloat32, Shape{4});
  RETURN_IF_ERROR(comm_->AllReduce(all_sums, ReduceOp::kSum, stream_));
  if (replica_comm_ != nullptr) {
    RETURN_IF_ERROR(replica_comm_->AllReduce(all_sums, ReduceOp::kSum, stream_));
  }
  RETURN_IF_ERROR(EndForwardPass());
  float host[4];
  RETURN_IF_ERROR(ops.CopyToHost(host, sums, sizeof(host), stream_));
  RETURN_IF_ERROR(ops.Synchronize(stream_));
  RETURN_IF_ERROR(comm_->FirstFailure());
  if (replica_comm_ != nullptr) RETURN_IF_ERROR(replica_comm_->FirstFailure());
  ShadowReport report;
  report.fp8_loss = host[kFp8LossSum] / std::max(1.0f, host[kFp8Tokens]);
  report.bf16_loss = host[kBf16LossSum] / std::max(1.0f, host[kBf16Tokens]);
  report.tokens = static_cast<int64_t>(host[kFp8Tokens]);
  report.time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace tessera

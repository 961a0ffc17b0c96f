// The training step, top to bottom: read batch -> all-gather -> forward
// (block l + 1's weights gathered while block l computes) -> fused linear +
// cross-entropy -> backward (block l's gradients reduce-scattered while block
// l - 1's backward runs; which buffer set each block uses, and what frees
// it, is weight_ring_ and grad_ring_, common/block_buffer_ring.h; under
// hybrid sharding then all-reduced across replicas) -> the embedding's
// gradient (reduce-scattered, or built in each shard from every rank's
// gathered tokens and residual-gradient rows) -> one packed all-reduce of
// [loss, tokens, grad sum of squares] -> clip scale -> FusedAdam (new fp32
// master, Adam state and FP8 shards) -> one packed all-reduce of every amax
// -> FP8 scale update. Everything it touches was allocated at setup.
//
// Step() reads the batch and writes it, with this step's learning rate and
// bias corrections, into engine memory; QueueStep() queues the rest on the
// trainer's stream. A one-rank CUDA job captures QueueStep once (its second
// step: the first allocates scratch and tunes GEMM plans) and from then on
// replays the capture, so the host issues one launch per step (not under
// data.document_masking: attention is planned for each batch's documents,
// so those steps stay queued). Every
// fp8.shadow_interval_steps steps the bf16 shadow loss runs after the step,
// eagerly, outside the capture (shadow_loss.cc).
//
// Every fp8.stats_interval_steps steps (steps 0, N, 2N, ...) the step also
// measures its FP8 tensors beside their casts (fp8_step_stats.h). Such a
// step runs eagerly, never replayed or captured: the captured graph holds
// none of the measurements, so the steps between pay nothing for them.
#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/lr_schedule.h"
#include "worker/trainer/phase_range.h"

namespace tessera {
namespace {

using Role = Fp8TensorReport::Role;

// The step clock's marks a step takes at most: per block, 2 in the forward
// (its compute, its gather's wait) and 8 in the backward (compute and the
// regather's wait, compute and the gradient buffer's wait, compute before
// the recomputation, the recomputation, the block's own backward, the
// gradient reduction); and fewer than 32 outside the blocks. Every job the
// spec limits allow fits.
constexpr int kMaxMarksPerBlock = 10, kMaxMarksOutsideBlocks = 32;
static_assert(Ops::kTimeMarks >= kMaxMarksPerBlock * kMaxLayers + kMaxMarksOutsideBlocks,
              "a step of the deepest model allowed needs more time marks");

// Slots of FsdpTrainer::scalars_.
constexpr int kLossSum = 0, kValidTokens = 1, kGradSumSq = 2, kGradNorm = 3, kGradScale = 4;

TensorDesc View(const DeviceTensor& t, DType dtype, Shape shape) {
  TensorDesc d = t.desc;
  d.dtype = dtype;
  d.shape = shape;
  return d;
}

TensorDesc Full(const DeviceTensor& gathered, const Fp8ShardedParam& p) {
  return View(gathered, gathered.desc.dtype, p.cols == 1 ? Shape{p.rows} : Shape{p.rows, p.cols});
}

// AdamW's settings for `step` (0-based) of a `steps`-step job.
AdamHyper HyperFor(const v1::OptimizerConfig& optimizer, int step, int steps) {
  AdamHyper hyper;
  hyper.lr = LearningRate(optimizer, step, steps);
  hyper.beta1 = optimizer.beta1();
  hyper.beta2 = optimizer.beta2();
  hyper.eps = optimizer.eps();
  hyper.weight_decay = optimizer.weight_decay();
  hyper.step = step + 1;
  return hyper;
}

}  // namespace

absl::StatusOr<StepReport> FsdpTrainer::RunStep(int step) {
  absl::StatusOr<StepReport> report = Step(step);
  // Abort() breaks the collectives, which then fail with their own error;
  // the stop was asked for, so it is reported as such.
  if (!report.ok() && aborted_) return absl::CancelledError("step aborted");
  return report;
}

absl::StatusOr<StepReport> FsdpTrainer::Step(int step) {
  if (!collective_ready_) return absl::FailedPreconditionError("RunStep before InitCollective");
  if (step != next_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("steps must be consecutive: expected ", next_step_, ", got ", step));
  }
  RETURN_IF_ERROR(CheckAborted());
  const auto started = std::chrono::steady_clock::now();
  Ops& ops = *ops_;
  const int64_t t = tokens_;

  // ---- Batch: this rank's micro-batch for `step`, onto the engine --------
  PhaseRange step_range("step");
  // Under data.document_masking the batch also brings attention's document
  // starts, and the targets that begin a document come back ignored, so
  // the valid-token count below leaves them out.
  RETURN_IF_ERROR(data_->ReadBatch(step, absl::MakeSpan(host_inputs_), absl::MakeSpan(host_targets_),
                                   absl::MakeSpan(host_doc_starts_)));
  int64_t local_tokens = 0;
  for (int32_t target : host_targets_) local_tokens += target != kIgnoreIndex ? 1 : 0;
  RETURN_IF_ERROR(ops.CopyToDevice(inputs_.desc.data, host_inputs_.data(), t * 4, stream_));
  RETURN_IF_ERROR(ops.CopyToDevice(targets_.desc.data, host_targets_.data(), t * 4, stream_));
  RETURN_IF_ERROR(CopyDocStartsToDevice());
  // ---- This step's learning rate and bias corrections, which FusedAdam
  // reads from engine memory (a replayed step cannot take new arguments) --
  const AdamHyper hyper = HyperFor(spec_.optimizer(), step, spec_.steps());
  const AdamStepValues step_values = StepValuesFor(hyper);
  RETURN_IF_ERROR(ops.CopyToDevice(adam_step_values_.desc.data, &step_values,
                                   sizeof(step_values), stream_));
  const bool measure_fp8 =
      fp8_stats_ != nullptr && step % spec_.fp8().stats_interval_steps() == 0;

  // ---- The step's work: queued as it runs until one step has run, then
  // captured once (where CapturesSteps) and replayed with one launch --------
  StepReport report;
  if (step_graph_ == nullptr && eager_steps_ >= 1 && step_graph_status_.ok() &&
      CapturesSteps() && !measure_fp8) {
    step_graph_status_ = CaptureStep();  // if it fails, the steps stay eager
    if (step_graph_status_.ok()) {
      report.engine_note = "step captured in a CUDA graph; later steps replay it with one launch";
    } else {
      report.engine_note = absl::StrCat("steps stay queued kernel by kernel: capturing one in a "
                                        "CUDA graph failed: ", step_graph_status_.ToString());
      report.engine_note_is_warning = true;
    }
  }
  if (step_graph_ != nullptr && !measure_fp8) {
    RETURN_IF_ERROR(clock_.Reopen());
    RETURN_IF_ERROR(ops.Replay(*step_graph_, stream_));
  } else {
    measuring_fp8_ = measure_fp8;
    const absl::Status queued = QueueStep();
    measuring_fp8_ = false;
    RETURN_IF_ERROR(queued);
    ++eager_steps_;
  }
  if (measure_fp8) RETURN_IF_ERROR(fp8_stats_->CopyToHost(ops, stream_));

  // ---- Report --------------------------------------------------------------
  float host_scalars[5];
  RETURN_IF_ERROR(ops.CopyToHost(host_scalars, scalars_.data<float>(), sizeof(host_scalars),
                                 stream_));
  RETURN_IF_ERROR(ops.Synchronize(stream_));
  // The collectives were queued, not waited for: only now is it known that
  // they all finished (a lost peer surfaces here as ABORTED).
  RETURN_IF_ERROR(comm_->FirstFailure());
  if (replica_comm_ != nullptr) RETURN_IF_ERROR(replica_comm_->FirstFailure());
  report.step = step;
  report.loss = host_scalars[kLossSum] / std::max(1.0f, host_scalars[kValidTokens]);
  report.grad_norm = host_scalars[kGradNorm];
  report.lr = hyper.lr;
  report.tokens = local_tokens;
  report.compute_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSIGN_OR_RETURN(report.phases, clock_.Finish(report.compute_time_s));
  ASSIGN_OR_RETURN(const int64_t in_use, ops.MemoryInUseBytes());
  peak_memory_bytes_ = std::max(peak_memory_bytes_, in_use);
  report.peak_memory_bytes = peak_memory_bytes_;
  if (measure_fp8) report.fp8_stats = fp8_stats_->Read();
  // ---- The bf16 shadow loss, every fp8.shadow_interval_steps steps: after
  // the step and outside its captured graph (shadow_loss.cc) ---------------
  if (ShadowLossAfterStep(step)) {
    ASSIGN_OR_RETURN(report.shadow, RunShadowLoss());
  }
  next_step_ = step + 1;
  return report;
}

bool FsdpTrainer::CapturesSteps() const {
  // Under document masking each step's attention is planned for that
  // batch's documents (Ops::AttentionForward), which a replay cannot change.
  return stream_ != nullptr && world_ == 1 && replica_comm_ == nullptr &&
         !spec_.disable_step_graph() && !spec_.data().document_masking();
}

absl::Status FsdpTrainer::CaptureStep() {
  RETURN_IF_ERROR(ops_->BeginCapture(stream_));
  const absl::Status queued = QueueStep();
  // Ends the capture whether or not the queueing failed.
  absl::StatusOr<std::unique_ptr<Ops::CapturedWork>> graph = ops_->EndCapture(stream_);
  if (!queued.ok()) return queued;
  if (!graph.ok()) return graph.status();
  step_graph_ = *std::move(graph);
  return absl::OkStatus();
}

absl::Status FsdpTrainer::QueueStep() {
  Ops& ops = *ops_;
  float* scalars = scalars_.data<float>();
  const float eps = spec_.model().norm_eps();
  const int64_t h = hidden_;
  RETURN_IF_ERROR(ops.Memset(scalars, 0, 3 * sizeof(float), stream_));
  if (measuring_fp8_) RETURN_IF_ERROR(fp8_stats_->Begin(ops, stream_));
  // Each phase below ends with a lap of the step clock, which charges the
  // time since the previous lap to that phase; a wait on collectives is a
  // WaitLap, which also says where the step waited.
  RETURN_IF_ERROR(clock_.Start(stream_));

  // ---- All-gather: the embedding, with block 0's weights queued behind it
  // Every all-gather and reduce-scatter below runs on the communicator's
  // stream; the compute stream waits for one only where it reads the result.
  CollectiveTicket head_gathered;
  CollectiveTicket tokens_gathered;  // every rank's token ids, for the embedding's backward
  {
    PhaseRange range("all-gather");
    ASSIGN_OR_RETURN(const CollectiveTicket embedding_gathered,
                     StartGather({{&embedding_, &gathered_embedding_}}));
    if (embedding_grad_from_rows_) {
      const AllGatherPart ids{inputs_.desc.data, all_inputs_.desc.data, inputs_.desc.Bytes()};
      ASSIGN_OR_RETURN(tokens_gathered, comm_->StartAllGather({&ids, 1}, stream_));
    }
    for (int l = 0; l < weight_ring_.FirstGathers(); ++l) {
      ASSIGN_OR_RETURN(gather_done_[l], StartGatherBlock(l, GatheredFor(l)));
    }
    RETURN_IF_ERROR(comm_->WaitFor(embedding_gathered, stream_));
    RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kFirstGather, stream_));
  }

  // ---- Forward: block l computes while the next blocks' weights are
  // gathered (weight_ring_ says how far ahead, into which set)
  {
    PhaseRange range("forward");
    RETURN_IF_ERROR(ops.EmbeddingForward(inputs_.desc, Full(gathered_embedding_, embedding_),
                                         acts_[0].x_in.desc, stream_));
    for (int l = 0; l < layers_; ++l) {
      RETURN_IF_ERROR(CheckAborted());
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kForward, stream_));
      RETURN_IF_ERROR(comm_->WaitFor(gather_done_[l], stream_));
      RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kForwardGather, stream_));
      // Queued now, so after block l - 1, the last reader of the set it fills.
      if (const int ahead = weight_ring_.GatheredAheadOf(l); ahead >= 0) {
        ASSIGN_OR_RETURN(gather_done_[ahead], StartGatherBlock(ahead, GatheredFor(ahead)));
      }
      if (l + 1 == layers_) {
        ASSIGN_OR_RETURN(head_gathered, StartGather({{&final_norm_, &gathered_final_norm_},
                                                     {&lm_head_, &gathered_lm_head_}}));
      }
      const TensorDesc& x_out = l + 1 < layers_ ? acts_[l + 1].x_in.desc : x_final_.desc;
      RETURN_IF_ERROR(BlockForward(l, GatheredFor(l), acts_[l], acts_[l].x_in.desc, x_out));
    }
    RETURN_IF_ERROR(clock_.Lap(StepPhase::kForward, stream_));
    RETURN_IF_ERROR(comm_->WaitFor(head_gathered, stream_));
    RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kHeadGather, stream_));
    RETURN_IF_ERROR(ops.RmsNormForward(x_final_.desc, Full(gathered_final_norm_, final_norm_), eps,
                                       h_final_.desc, rstd_final_.desc, stream_));
    RETURN_IF_ERROR(clock_.Lap(StepPhase::kForward, stream_));
  }

  // ---- Fused LM head + cross-entropy: sum loss, valid count, grads -------
  {
    PhaseRange range("fused-loss");
    RETURN_IF_ERROR(ops.FusedLinearCrossEntropy(
        h_final_.desc, Full(gathered_lm_head_, lm_head_), targets_.desc, kIgnoreIndex,
        spec_.loss_chunk_tokens(), scalars + kLossSum, scalars + kValidTokens, grad_h_.desc,
        View(grad_lm_head_, DType::kFloat32, Shape{vocab_, h}), /*accumulate_grad_weight=*/false,
        stream_));
    RETURN_IF_ERROR(clock_.Lap(StepPhase::kLoss, stream_));
  }

  // ---- Backward ----------------------------------------------------------
  std::optional<PhaseRange> backward_range(std::in_place, "backward");
  RETURN_IF_ERROR(
      ops.Memset(grad_final_norm_.desc.data, 0, grad_final_norm_.desc.Bytes(), stream_));
  RETURN_IF_ERROR(ops.RmsNormBackward(grad_h_.desc, x_final_.desc,
                                      Full(gathered_final_norm_, final_norm_), rstd_final_.desc,
                                      grad_residual_.desc, /*accumulate_grad_x=*/false,
                                      View(grad_final_norm_, DType::kFloat32, Shape{h}), stream_));
  // The LM head's and final norm's gradients are complete: they are reduced
  // under the blocks' backward.
  ASSIGN_OR_RETURN(const CollectiveTicket head_reduced,
                   StartReduceScatter({{&final_norm_, &grad_final_norm_},
                                       {&lm_head_, &grad_lm_head_}}));
  // Block l's backward runs while the later blocks' gradients are
  // reduce-scattered and (when resharding) earlier blocks' weights gathered.
  for (int l = layers_ - 1; l >= 0; --l) {
    RETURN_IF_ERROR(CheckAborted());
    if (!weight_ring_.HeldThroughBackward(l)) {
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
      RETURN_IF_ERROR(comm_->WaitFor(gather_done_[l], stream_));
      RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kBackwardGather, stream_));
    }
    // Queued now, so after block l + 1, the last reader of the set it fills.
    if (const int ahead = weight_ring_.RegatheredAheadOf(l); ahead >= 0) {
      ASSIGN_OR_RETURN(gather_done_[ahead], StartGatherBlock(ahead, GatheredFor(ahead)));
    }
    // Block l writes the gradient set whose previous writer's reduce-scatter
    // must have read it.
    if (const int previous = grad_ring_.GradientSetFreedBy(l); previous >= 0) {
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
      RETURN_IF_ERROR(comm_->WaitFor(grads_reduced_[previous], stream_));
      RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kGradientBuffer, stream_));
    }
    // A block under memory.recompute first writes again what its forward
    // did not keep, from the weights just waited for.
    if (Recomputes(l)) {
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
      RETURN_IF_ERROR(RecomputeForward(l, GatheredFor(l), acts_[l]));
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kRecompute, stream_));
    }
    RETURN_IF_ERROR(BlockBackward(l, GatheredFor(l), acts_[l], grad_residual_.desc));
    RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
    ASSIGN_OR_RETURN(grads_reduced_[l], StartReduceScatterBlock(l));
    // Hybrid sharding: block l + 1's reduced shards go on to the replicas.
    if (l + 1 < layers_) RETURN_IF_ERROR(ReduceAcrossReplicas(l + 1, grads_reduced_[l + 1]));
    RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kGradientReduce, stream_));
  }
  // The embedding's gradient: a scatter-add of the residual gradient's rows
  // into the whole table's, reduce-scattered when sharded. Or, where the
  // ranks' tokens are fewer than the vocabulary's rows (embedding_grad_from_
  // rows_, the 8B shape), no [V, H] gradient at all: the ranks all-gather
  // their [T, H] residual gradients (with the token ids gathered at the
  // step's start), and each adds the rows of its own shard from every
  // rank's tokens, in rank and token order. That moves world x T rows
  // instead of V.
  CollectiveTicket embedding_rows_gathered;
  if (!embedding_grad_from_rows_) {
    RETURN_IF_ERROR(
        ops.Memset(grad_embedding_.desc.data, 0, grad_embedding_.desc.Bytes(), stream_));
    RETURN_IF_ERROR(ops.EmbeddingBackward(inputs_.desc, grad_residual_.desc,
                                          View(grad_embedding_, DType::kFloat32, Shape{vocab_, h}),
                                          /*first_row=*/0, vocab_, stream_));
  } else {
    const AllGatherPart rows{grad_residual_.desc.data, all_embedding_grad_rows_.desc.data,
                             grad_residual_.desc.Bytes()};
    ASSIGN_OR_RETURN(embedding_rows_gathered, comm_->StartAllGather({&rows, 1}, stream_));
    // The shard's gradient is zeroed while the rows are in flight: it
    // needs none of them.
    const TensorDesc& shard = embedding_.grad_shard.desc;
    RETURN_IF_ERROR(ops.Memset(shard.data, 0, shard.Bytes(), stream_));
  }
  RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
  {
    PhaseRange range("reduce-scatter");
    CollectiveTicket embedding_reduced;
    if (!embedding_grad_from_rows_) {
      ASSIGN_OR_RETURN(embedding_reduced, StartReduceScatter({{&embedding_, &grad_embedding_}}));
    }
    for (int l = 0; l < grad_ring_.UnwaitedAfterBackward(); ++l) {
      RETURN_IF_ERROR(comm_->WaitFor(grads_reduced_[l], stream_));
    }
    RETURN_IF_ERROR(comm_->WaitFor(head_reduced, stream_));
    RETURN_IF_ERROR(comm_->WaitFor(embedding_reduced, stream_));
    if (embedding_grad_from_rows_) {
      RETURN_IF_ERROR(comm_->WaitFor(tokens_gathered, stream_));
      RETURN_IF_ERROR(comm_->WaitFor(embedding_rows_gathered, stream_));
      RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kFinalReduce, stream_));
      RETURN_IF_ERROR(ops.EmbeddingBackward(
          all_inputs_.desc, all_embedding_grad_rows_.desc,
          View(embedding_.grad_shard, DType::kFloat32,
               Shape{embedding_.layout.local_rows(), h}),
          embedding_.layout.begin_row(), vocab_, stream_));
      RETURN_IF_ERROR(clock_.Lap(StepPhase::kBackward, stream_));
    }
    RETURN_IF_ERROR(ReduceAcrossReplicas(0, grads_reduced_[0]));
    RETURN_IF_ERROR(ReduceAcrossReplicas(-1, embedding_reduced));
    RETURN_IF_ERROR(WaitForReplicas());
    RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kFinalReduce, stream_));
  }
  RETURN_IF_ERROR(CheckAborted());
  backward_range.reset();
  PhaseRange optimizer_range("optimizer");

  // ---- Global loss, token count and gradient norm: one packed all-reduce --
  RETURN_IF_ERROR(ops.GradSumSquares(*adam_, scalars + kGradSumSq, stream_));
  RETURN_IF_ERROR(clock_.Lap(StepPhase::kOptimizer, stream_));
  RETURN_IF_ERROR(comm_->AllReduce(MakeTensor(scalars, DType::kFloat32, Shape{3}), ReduceOp::kSum,
                                   stream_));
  // Replicas hold the same reduced gradients: only loss and tokens add up.
  if (replica_comm_ != nullptr) {
    RETURN_IF_ERROR(replica_comm_->AllReduce(MakeTensor(scalars, DType::kFloat32, Shape{2}),
                                             ReduceOp::kSum, stream_));
  }
  RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kAllReduce, stream_));
  RETURN_IF_ERROR(ops.ComputeGradScale(scalars + kGradSumSq, scalars + kValidTokens,
                                       spec_.optimizer().grad_clip_norm(), scalars + kGradNorm,
                                       scalars + kGradScale, stream_));

  // ---- FusedAdam: master, m, v and the FP8 shards in one pass ------------
  // The settings every step shares; the learning rate and bias corrections
  // are read from adam_step_values_, which Step() writes for each step.
  AdamHyper hyper = HyperFor(spec_.optimizer(), /*step=*/0, spec_.steps());
  hyper.step_values = adam_step_values_.data<float>();
  RETURN_IF_ERROR(ops.FusedAdam(*adam_, hyper, scalars + kGradScale, stream_));
  // The FP8 shards now hold bytes encoded with the weights' current scales;
  // record that 1/scale on every rank before the scales move on.
  RETURN_IF_ERROR(meta_->RecordWeightEncodeScales(ops, stream_));
  // Delayed scaling: the weights as FusedAdam just encoded them, before the
  // scales move on (current scaling encodes them again below).
  if (!meta_->current_scaling()) RETURN_IF_ERROR(MeasureFp8Weights());

  // ---- FP8 scaling: every amax in one all-reduce, then new scales --------
  RETURN_IF_ERROR(clock_.Lap(StepPhase::kOptimizer, stream_));
  RETURN_IF_ERROR(comm_->AllReduce(meta_->amaxes(), ReduceOp::kMax, stream_));
  if (replica_comm_ != nullptr) {
    RETURN_IF_ERROR(replica_comm_->AllReduce(meta_->amaxes(), ReduceOp::kMax, stream_));
  }
  RETURN_IF_ERROR(clock_.WaitLap(CollectiveSite::kAllReduce, stream_));
  RETURN_IF_ERROR(meta_->UpdateScales(ops, stream_));
  if (meta_->current_scaling()) {
    RETURN_IF_ERROR(QuantizeWeightsFromMaster(stream_));
    RETURN_IF_ERROR(MeasureFp8Weights());
  }
  return clock_.Lap(StepPhase::kOptimizer, stream_);
}

absl::Status FsdpTrainer::MeasureFp8(int l, BlockLinear linear, Role role, const TensorDesc& in,
                                     InputScaling scaling) {
  if (!measuring_fp8_ || scaling != InputScaling::kMeasure) return absl::OkStatus();
  const LinearId id{l, linear};
  if (role == Role::kGradient) {
    return fp8_stats_->Measure(*ops_, id, role, in, DType::kE5M2,
                               meta_->scale(meta_->layout().GradSlot(id)), stream_);
  }
  return fp8_stats_->Measure(*ops_, id, role, in, DType::kE4M3,
                             meta_->scale(meta_->layout().InputSlot(id)), stream_);
}

absl::Status FsdpTrainer::MeasureFp8Weights() {
  if (!measuring_fp8_) return absl::OkStatus();
  for (int l = 0; l < layers_; ++l) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      const Fp8ShardedParam& p = blocks_[l].linear(linear);
      const TensorDesc master = Reshaped(p.master.desc, Shape{p.layout.shard_numel()});
      RETURN_IF_ERROR(fp8_stats_->Measure(*ops_, LinearId{l, linear}, Role::kWeight, master,
                                          DType::kE4M3, p.scale, stream_));
    }
  }
  return absl::OkStatus();
}

TensorDesc FsdpTrainer::StatsScratch(Shape shape) const {
  return View(fp8_stats_scratch_, DType::kBFloat16, shape);
}

// y = linear(RMSNorm(x)) for a block's qkv or gate/up projection; rstd is saved for backward. With fused FP8 casts the norm
// writes the linear's FP8 input (and its transpose, saved for the weight
// gradient) itself; otherwise it writes the bf16 `normed`, which the linear
// quantizes or multiplies.
absl::Status FsdpTrainer::NormThenLinear(int l, BlockLinear linear, const TensorDesc& x,
                                         const TensorDesc& norm_weight, const TensorDesc& rstd,
                                         const TensorDesc& normed, const TensorDesc& weight,
                                         const TensorDesc& y, LinearSaved& saved,
                                         InputScaling scaling) {
  Ops& ops = *ops_;
  const float eps = spec_.model().norm_eps();
  const int64_t t = x.shape[0];  // the tokens of the batch passed
  const LinearSpec spec = Spec(l, linear, t);
  if (fuse_fp8_casts_) {
    const Fp8Operand x8 = Fp8Input(*meta_, spec, scratch_, saved);
    RETURN_IF_ERROR(
        ops.RmsNormForwardQuantize(x, norm_weight, eps, x8.codes, x8.codes_t, rstd, stream_));
    RETURN_IF_ERROR(LinearForwardFromFp8(ops, *meta_, spec, weight, x8, y, stream_));
    if (!measuring_fp8_ || scaling != InputScaling::kMeasure) return absl::OkStatus();
    // The bf16 input the fused cast encoded, written again for the
    // statistics: the same bits (and rstd) as the fused op's (ops.h).
    const TensorDesc normed_again = StatsScratch(Shape{t, hidden_});
    RETURN_IF_ERROR(ops.RmsNormForward(x, norm_weight, eps, normed_again, rstd, stream_));
    return MeasureFp8(l, linear, Role::kInput, normed_again);
  }
  RETURN_IF_ERROR(ops.RmsNormForward(x, norm_weight, eps, normed, rstd, stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, spec, weight, normed, y, scratch_, saved, stream_,
                                /*residual=*/nullptr, scaling));
  return MeasureFp8(l, linear, Role::kInput, normed, scaling);
}

AttentionDocuments FsdpTrainer::BatchDocuments(int64_t batch) const {
  if (!spec_.data().document_masking()) return Ops::WholeSequences();
  const TensorDesc starts = LeadingRows(doc_starts_.desc, batch);
  if (device_documents_.rows != batch) return starts;
  return AttentionDocuments(starts, device_documents_.counts);
}

absl::Status FsdpTrainer::CopyDocStartsToDevice() {
  if (!spec_.data().document_masking()) return absl::OkStatus();
  return CopyDocStartsToDevice(host_doc_starts_);
}

absl::Status FsdpTrainer::CopyDocStartsToDevice(absl::Span<const int32_t> starts) {
  device_documents_.rows = static_cast<int64_t>(starts.size()) / seq_;
  device_documents_.counts = CountDocuments(starts, seq_);
  return ops_->CopyToDevice(doc_starts_.desc.data, starts.data(),
                            starts.size() * sizeof(int32_t), stream_);
}

// The batch is x_in's: its rows are the tokens of the first t / S
// sequences, the whole micro-batch in the step and its recomputation, fewer
// in the shadow loss. Every activation is the prefix of its buffer that
// holds those sequences, so a smaller batch runs the same code on fewer
// rows.
absl::Status FsdpTrainer::BlockForward(int l, const GatheredBlock& w, BlockActivations& a,
                                       const TensorDesc& x_in, const TensorDesc& x_out,
                                       ForwardPass pass) {
  Ops& ops = *ops_;
  const Block& b = blocks_[l];
  const int64_t t = x_in.shape[0], batch = t / seq_, f = ffn_;
  const auto tokens = [&](const DeviceTensor& d) { return LeadingRows(d.desc, t); };
  const TensorDesc qkv = LeadingRows(a.qkv.desc, batch);  // [batch, S, nh + 2*nkv, hd]
  const TensorDesc attn = tokens(a.attn), x_mid = tokens(a.x_mid), gate_up = tokens(a.gate_up);
  const InputScaling scaling =
      pass == ForwardPass::kStep ? InputScaling::kMeasure : InputScaling::kReuse;
  // Attention: x_mid = x_in + out_proj(attention(rope(qkv(norm(x_in))))),
  // qkv's [t, qkv width] output viewed as [batch, S, nh + 2*nkv, hd]. The
  // out_proj and down GEMMs add the residual stream as they write it.
  RETURN_IF_ERROR(NormThenLinear(l, BlockLinear::kQkv, x_in, Full(w.attn_norm, b.attn_norm),
                                 tokens(a.rstd1), tokens(a.h1), Full(w.qkv, b.qkv),
                                 Reshaped(qkv, Shape{t, qkv_width_}), a.saved[BlockLinear::kQkv],
                                 scaling));
  RETURN_IF_ERROR(ops.RopeForward(qkv, kv_heads_, spec_.model().rope_theta(), stream_));
  RETURN_IF_ERROR(ops.AttentionForward(qkv, kv_heads_, BatchDocuments(batch),
                                       Reshaped(attn, Shape{batch, seq_, heads_, head_dim_}),
                                       LeadingRows(a.lse.desc, batch), stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, Spec(l, BlockLinear::kOutProj, t),
                                Full(w.out_proj, b.out_proj), attn, x_mid, scratch_,
                                a.saved[BlockLinear::kOutProj], stream_, &x_in, scaling));
  RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kOutProj, Role::kInput, attn, scaling));
  // MLP: x_out = x_mid + down(swiglu(gate_up(norm(x_mid)))).
  RETURN_IF_ERROR(NormThenLinear(l, BlockLinear::kGateUp, x_mid, Full(w.mlp_norm, b.mlp_norm),
                                 tokens(a.rstd2), tokens(a.h2), Full(w.gate_up, b.gate_up),
                                 gate_up, a.saved[BlockLinear::kGateUp], scaling));
  if (pass == ForwardPass::kRecompute) return RecomputeSwiGlu(l, a);
  const LinearSpec down = Spec(l, BlockLinear::kDown, t);
  if (fuse_fp8_casts_) {  // SwiGLU straight into the down projection's FP8 input
    const Fp8Operand x8 = Fp8Input(*meta_, down, scratch_, a.saved[BlockLinear::kDown]);
    RETURN_IF_ERROR(ops.SwiGluForwardQuantize(gate_up, x8.codes, x8.codes_t, stream_));
    RETURN_IF_ERROR(LinearForwardFromFp8(ops, *meta_, down, Full(w.down, b.down), x8, x_out,
                                         stream_, &x_mid));
    if (!measuring_fp8_) return absl::OkStatus();
    // The bf16 SwiGLU the fused cast encoded, the same bits (ops.h).
    const TensorDesc swiglu_again = StatsScratch(Shape{t, f});
    RETURN_IF_ERROR(ops.SwiGluForward(gate_up, swiglu_again, stream_));
    return MeasureFp8(l, BlockLinear::kDown, Role::kInput, swiglu_again);
  }
  const TensorDesc swiglu = Reshaped(tokens(a.swiglu), Shape{t, f});
  RETURN_IF_ERROR(ops.SwiGluForward(gate_up, swiglu, stream_));
  RETURN_IF_ERROR(LinearForward(ops, *meta_, down, Full(w.down, b.down), swiglu, x_out, scratch_,
                                a.saved[BlockLinear::kDown], stream_, &x_mid));
  return MeasureFp8(l, BlockLinear::kDown, Role::kInput, swiglu);
}

// Activation recomputation (job.proto's MemoryConfig). BLOCKS runs the
// block's forward again up to the down projection's input; SELECTIVE keeps
// the GEMMs' and attention's outputs and runs again only the norms, the
// SwiGLU and the FP8 casts. Either way the FP8 inputs are quantized with
// the scales the step's forward used, so every tensor the backward reads is
// the same bits as without recomputation.
absl::Status FsdpTrainer::RecomputeForward(int l, const GatheredBlock& w, BlockActivations& a) {
  if (spec_.memory().recompute() == v1::MemoryConfig::BLOCKS) {
    return BlockForward(l, w, a, a.x_in.desc, /*x_out=*/TensorDesc{}, ForwardPass::kRecompute);
  }
  Ops& ops = *ops_;
  const Block& b = blocks_[l];
  const float eps = spec_.model().norm_eps();
  // A norm and the FP8 cast of its output: the qkv and gate/up inputs.
  const auto norm_input = [&](BlockLinear linear, const TensorDesc& x, const TensorDesc& weight,
                              const TensorDesc& rstd, const TensorDesc& normed) -> absl::Status {
    LinearSaved& saved = a.saved[linear];
    if (fuse_fp8_casts_) {
      const Fp8Operand x8 = Fp8Input(*meta_, Spec(l, linear), scratch_, saved);
      return ops.RmsNormForwardQuantize(x, weight, eps, x8.codes, x8.codes_t, rstd, stream_);
    }
    RETURN_IF_ERROR(ops.RmsNormForward(x, weight, eps, normed, rstd, stream_));
    return RequantizeInput(ops, *meta_, Spec(l, linear), normed, scratch_, saved, stream_);
  };
  RETURN_IF_ERROR(norm_input(BlockLinear::kQkv, a.x_in.desc, Full(w.attn_norm, b.attn_norm),
                             a.rstd1.desc, a.h1.desc));
  RETURN_IF_ERROR(RequantizeInput(ops, *meta_, Spec(l, BlockLinear::kOutProj), a.attn.desc,
                                  scratch_, a.saved[BlockLinear::kOutProj], stream_));
  RETURN_IF_ERROR(norm_input(BlockLinear::kGateUp, a.x_mid.desc, Full(w.mlp_norm, b.mlp_norm),
                             a.rstd2.desc, a.h2.desc));
  return RecomputeSwiGlu(l, a);
}

// The SwiGLU of the recomputed forward: the down projection's input (its
// FP8 transpose, or the bf16 tensor a bf16 linear's backward reads).
absl::Status FsdpTrainer::RecomputeSwiGlu(int l, BlockActivations& a) {
  Ops& ops = *ops_;
  const LinearSpec spec = Spec(l, BlockLinear::kDown);
  LinearSaved& saved = a.saved[BlockLinear::kDown];
  if (fuse_fp8_casts_) {
    const Fp8Operand x8 = Fp8Input(*meta_, spec, scratch_, saved);
    return ops.SwiGluForwardQuantize(a.gate_up.desc, x8.codes, x8.codes_t, stream_);
  }
  RETURN_IF_ERROR(ops.SwiGluForward(a.gate_up.desc, a.swiglu.desc, stream_));
  return RequantizeInput(ops, *meta_, spec,
                         Reshaped(a.swiglu.desc, Shape{tokens_, ffn_}), scratch_, saved, stream_);
}

// grad_residual holds d loss / d x_out on entry and d loss / d x_in on return:
// each RMSNorm backward adds its branch's gradient into it in place.
absl::Status FsdpTrainer::BlockBackward(int l, const GatheredBlock& w, BlockActivations& a,
                                        const TensorDesc& grad_residual) {
  Ops& ops = *ops_;
  const Block& b = blocks_[l];
  BlockGrads& grads = GradsFor(l);
  const int64_t t = tokens_, h = hidden_, f = ffn_;
  for (DeviceTensor* g : {&grads.attn_norm, &grads.mlp_norm}) {
    RETURN_IF_ERROR(ops.Memset(g->desc.data, 0, g->desc.Bytes(), stream_));
  }
  const TensorDesc d_bf16_th = View(grad_bf16_b_, DType::kBFloat16, Shape{t, h});
  // The output gradient of down and of out_proj is the fp32 residual
  // gradient. An FP8 linear quantizes it straight from fp32 (one pass into
  // e5m2 and its transpose); a bf16 linear needs a bf16 copy first.
  const auto residual_as_dy = [&]() -> absl::StatusOr<TensorDesc> {
    if (fp8_) return grad_residual;
    RETURN_IF_ERROR(ops.Cast(grad_residual, grad_h_.desc, stream_));
    return grad_h_.desc;
  };
  // MLP backward.
  ASSIGN_OR_RETURN(const TensorDesc dy_down, residual_as_dy());
  const TensorDesc d_swiglu = View(grad_bf16_b_, DType::kBFloat16, Shape{t, f});
  RETURN_IF_ERROR(LinearBackward(ops, *meta_, Spec(l, BlockLinear::kDown), Full(w.down, b.down), a.swiglu.desc,
                                 dy_down, d_swiglu, grads.down.desc, scratch_, a.saved[BlockLinear::kDown],
                                 stream_));
  RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kDown, Role::kGradient, dy_down));
  if (fuse_fp8_casts_) {  // SwiGLU's gradient straight into the gate/up FP8 gradient
    const Fp8Operand dy8 = Fp8Grad(*meta_, Spec(l, BlockLinear::kGateUp), scratch_);
    RETURN_IF_ERROR(
        ops.SwiGluBackwardQuantize(d_swiglu, a.gate_up.desc, dy8.codes, dy8.codes_t, stream_));
    if (measuring_fp8_) {  // the bf16 gradient the fused cast encoded, the same bits (ops.h)
      const TensorDesc d_gate_up_again = StatsScratch(Shape{t, 2 * f});
      RETURN_IF_ERROR(ops.SwiGluBackward(d_swiglu, a.gate_up.desc, d_gate_up_again, stream_));
      RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kGateUp, Role::kGradient, d_gate_up_again));
    }
    RETURN_IF_ERROR(LinearBackwardFromFp8(ops, *meta_, Spec(l, BlockLinear::kGateUp), Full(w.gate_up, b.gate_up),
                                          dy8, grad_h_.desc, grads.gate_up.desc, scratch_,
                                          a.saved[BlockLinear::kGateUp], stream_));
  } else {
    const TensorDesc d_gate_up = View(grad_bf16_a_, DType::kBFloat16, Shape{t, 2 * f});
    RETURN_IF_ERROR(ops.SwiGluBackward(d_swiglu, a.gate_up.desc, d_gate_up, stream_));
    RETURN_IF_ERROR(LinearBackward(ops, *meta_, Spec(l, BlockLinear::kGateUp), Full(w.gate_up, b.gate_up),
                                   a.h2.desc, d_gate_up, grad_h_.desc, grads.gate_up.desc,
                                   scratch_, a.saved[BlockLinear::kGateUp], stream_));
    RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kGateUp, Role::kGradient, d_gate_up));
  }
  // grad_residual becomes d loss / d x_mid.
  RETURN_IF_ERROR(ops.RmsNormBackward(grad_h_.desc, a.x_mid.desc, Full(w.mlp_norm, b.mlp_norm),
                                      a.rstd2.desc, grad_residual, /*accumulate_grad_x=*/true,
                                      Reshaped(grads.mlp_norm.desc, Shape{h}), stream_));
  // Attention backward.
  ASSIGN_OR_RETURN(const TensorDesc dy_out_proj, residual_as_dy());
  RETURN_IF_ERROR(LinearBackward(ops, *meta_, Spec(l, BlockLinear::kOutProj), Full(w.out_proj, b.out_proj),
                                 a.attn.desc, dy_out_proj, d_bf16_th, grads.out_proj.desc,
                                 scratch_, a.saved[BlockLinear::kOutProj], stream_));
  RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kOutProj, Role::kGradient, dy_out_proj));
  RETURN_IF_ERROR(ops.AttentionBackward(
      Reshaped(d_bf16_th, Shape{batch_, seq_, heads_, head_dim_}), a.qkv.desc, kv_heads_,
      BatchDocuments(batch_), Reshaped(a.attn.desc, Shape{batch_, seq_, heads_, head_dim_}), a.lse.desc, grad_qkv_.desc,
      stream_));
  RETURN_IF_ERROR(ops.RopeBackward(grad_qkv_.desc, kv_heads_, spec_.model().rope_theta(), stream_));
  RETURN_IF_ERROR(LinearBackward(ops, *meta_, Spec(l, BlockLinear::kQkv), Full(w.qkv, b.qkv), a.h1.desc,
                                 Reshaped(grad_qkv_.desc, Shape{t, qkv_width_}), grad_h_.desc,
                                 grads.qkv.desc, scratch_, a.saved[BlockLinear::kQkv], stream_));
  RETURN_IF_ERROR(MeasureFp8(l, BlockLinear::kQkv, Role::kGradient,
                             Reshaped(grad_qkv_.desc, Shape{t, qkv_width_})));
  // grad_residual becomes d loss / d x_in.
  return ops.RmsNormBackward(grad_h_.desc, a.x_in.desc, Full(w.attn_norm, b.attn_norm),
                             a.rstd1.desc, grad_residual, /*accumulate_grad_x=*/true,
                             Reshaped(grads.attn_norm.desc, Shape{h}), stream_);
}

}  // namespace tessera

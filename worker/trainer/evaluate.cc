// Forward passes outside the training step: the validation loss, and the
// logits of one sequence (ForwardLogits). Validation loss is the forward
// half of the training step over the held-out data, top to bottom: gather the embedding, final norm and LM head ->
// per micro-batch: embedding -> per block, gather then BlockForward ->
// final RMSNorm -> fused linear + cross-entropy (sums only matter) -> one
// all-reduce of [loss sum, valid tokens] -> mean.
//
// It must leave training exactly as it found it. It reads the weights but
// writes no parameter, gradient or Adam state: the fused loss runs loss
// only (no gradient buffer is passed to it, so none can be written, at any
// world size and with gradient accumulation). The activations and
// scratch it overwrites are rewritten by the next step before they are
// read. The one state a forward pass does change is FP8 scaling: every FP8
// linear records its input's amax (delayed scaling) or resets its input
// scale (current scaling) as it quantizes. So the packed quantizer block
// is copied aside first and copied back at the end, and the next step
// quantizes with exactly the scales and histories it would have had.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/validation_batch_source.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/phase_range.h"

namespace tessera {
namespace {

constexpr int kLossSum = 0, kValidTokens = 1;  // slots of eval_scalars_

TensorDesc Full(const DeviceTensor& gathered, const Fp8ShardedParam& p) {
  TensorDesc d = gathered.desc;
  d.shape = p.cols == 1 ? Shape{p.rows} : Shape{p.rows, p.cols};
  return d;
}

}  // namespace

absl::Status FsdpTrainer::SetupValidation() {
  ASSIGN_OR_RETURN(saved_fp8_meta_, Alloc(DType::kFloat32, Shape{meta_->packed().NumElements()}));
  if (!spec_.data().has_validation()) return absl::OkStatus();
  // Split over every rank of the job, as the training data is.
  ASSIGN_OR_RETURN(validation_sets_, OpenValidationSets(spec_, global_rank_, global_world_));
  ASSIGN_OR_RETURN(eval_scalars_,
                   Alloc(DType::kFloat32, Shape{static_cast<int64_t>(validation_sets_.size()), 2}));
  return absl::OkStatus();
}

absl::Status FsdpTrainer::BeginForwardPass() {
  const TensorDesc& fp8_state = meta_->packed();
  RETURN_IF_ERROR(ops_->CopyDeviceToDevice(saved_fp8_meta_.desc.data, fp8_state.data,
                                           fp8_state.Bytes(), stream_));
  ASSIGN_OR_RETURN(const CollectiveTicket outer_gathered,
                   StartGather({{&embedding_, &gathered_embedding_},
                                {&final_norm_, &gathered_final_norm_},
                                {&lm_head_, &gathered_lm_head_}}));
  return comm_->WaitFor(outer_gathered, stream_);
}

absl::Status FsdpTrainer::EndForwardPass() {
  const TensorDesc& fp8_state = meta_->packed();
  return ops_->CopyDeviceToDevice(fp8_state.data, saved_fp8_meta_.desc.data, fp8_state.Bytes(),
                                  stream_);
}

absl::Status FsdpTrainer::ForwardToFinalNorm(int64_t batch) {
  Ops& ops = *ops_;
  const int64_t t = batch * seq_;
  const auto tokens = [&](const DeviceTensor& d) { return LeadingRows(d.desc, t); };
  RETURN_IF_ERROR(ops.EmbeddingForward(tokens(inputs_), Full(gathered_embedding_, embedding_),
                                       tokens(acts_[0].x_in), stream_));
  for (int l = 0; l < layers_; ++l) {
    RETURN_IF_ERROR(GatherBlock(l, GatheredFor(l)));
    const TensorDesc x_out = tokens(l + 1 < layers_ ? acts_[l + 1].x_in : x_final_);
    RETURN_IF_ERROR(BlockForward(l, GatheredFor(l), acts_[l], tokens(acts_[l].x_in), x_out));
  }
  return ops.RmsNormForward(tokens(x_final_), Full(gathered_final_norm_, final_norm_),
                            spec_.model().norm_eps(), tokens(h_final_), tokens(rstd_final_),
                            stream_);
}

absl::StatusOr<std::vector<float>> FsdpTrainer::ForwardLogits(const std::vector<int32_t>& tokens) {
  if (!collective_ready_) return absl::FailedPreconditionError("ForwardLogits before InitCollective");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > seq_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens: 1 to seq_len (", seq_, ") tokens, got ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) {
      return absl::InvalidArgumentError(absl::StrCat("tokens[", i, "]: ", tokens[i],
                                                     " is outside the vocabulary [0, ", vocab_, ")"));
    }
  }
  RETURN_IF_ERROR(CheckAborted());
  PhaseRange range("forward-logits");
  Ops& ops = *ops_;
  RETURN_IF_ERROR(BeginForwardPass());
  // The sequence is the micro-batch's first; attention is causal, so the
  // padding after it and the other sequences do not reach its logits.
  std::fill(host_inputs_.begin(), host_inputs_.end(), 0);
  std::copy(tokens.begin(), tokens.end(), host_inputs_.begin());
  RETURN_IF_ERROR(ops.CopyToDevice(inputs_.desc.data, host_inputs_.data(), tokens_ * 4, stream_));
  // Under document masking the tokens are one document.
  std::fill(host_doc_starts_.begin(), host_doc_starts_.end(), 0);
  RETURN_IF_ERROR(CopyDocStartsToDevice());
  RETURN_IF_ERROR(ForwardToFinalNorm(batch_));
  ASSIGN_OR_RETURN(DeviceTensor logits, Alloc(DType::kFloat32, Shape{n, vocab_}));
  TensorDesc hidden = h_final_.desc;
  hidden.shape = Shape{n, hidden_};
  RETURN_IF_ERROR(ops.Gemm(hidden, false, Full(gathered_lm_head_, lm_head_), true, logits.desc,
                           /*accumulate=*/false, stream_));
  RETURN_IF_ERROR(EndForwardPass());
  std::vector<float> out(static_cast<size_t>(n * vocab_));
  RETURN_IF_ERROR(
      ops.CopyToHost(out.data(), logits.desc.data, out.size() * sizeof(float), stream_));
  RETURN_IF_ERROR(ops.Synchronize(stream_));
  RETURN_IF_ERROR(comm_->FirstFailure());
  return out;
}

absl::StatusOr<ValidationReport> FsdpTrainer::Evaluate() {
  absl::StatusOr<ValidationReport> report = Score();
  // As in RunStep: collectives broken by Abort() report the stop that was asked for.
  if (!report.ok() && aborted_) return absl::CancelledError("evaluation aborted");
  return report;
}

absl::StatusOr<ValidationReport> FsdpTrainer::Score() {
  if (validation_sets_.empty()) {
    return absl::FailedPreconditionError("Evaluate: the job has no data.validation section");
  }
  if (!collective_ready_) return absl::FailedPreconditionError("Evaluate before InitCollective");
  RETURN_IF_ERROR(CheckAborted());
  PhaseRange range("evaluate");
  Ops& ops = *ops_;
  const int64_t sets = static_cast<int64_t>(validation_sets_.size());
  float* sums = eval_scalars_.data<float>();  // [sets, 2]
  RETURN_IF_ERROR(BeginForwardPass());
  RETURN_IF_ERROR(ops.Memset(sums, 0, sets * 2 * sizeof(float), stream_));

  for (int64_t set = 0; set < sets; ++set) {
    float* set_sums = sums + 2 * set;
    for (int64_t batch = 0; batch < spec_.data().validation().eval_batches(); ++batch) {
      RETURN_IF_ERROR(CheckAborted());
      RETURN_IF_ERROR(validation_sets_[set].batches->ReadBatch(
          batch, absl::MakeSpan(host_inputs_), absl::MakeSpan(host_targets_),
          absl::MakeSpan(host_doc_starts_)));
      RETURN_IF_ERROR(CopyDocStartsToDevice());
      RETURN_IF_ERROR(
          ops.CopyToDevice(inputs_.desc.data, host_inputs_.data(), tokens_ * 4, stream_));
      RETURN_IF_ERROR(
          ops.CopyToDevice(targets_.desc.data, host_targets_.data(), tokens_ * 4, stream_));
      RETURN_IF_ERROR(ForwardToFinalNorm(batch_));
      RETURN_IF_ERROR(ops.FusedLinearCrossEntropy(
          h_final_.desc, Full(gathered_lm_head_, lm_head_), targets_.desc, kIgnoreIndex,
          spec_.loss_chunk_tokens(), set_sums + kLossSum, set_sums + kValidTokens,
          /*grad_x=*/TensorDesc{}, /*grad_weight=*/TensorDesc{},  // loss only
          /*accumulate_grad_weight=*/false, stream_));
    }
  }

  RETURN_IF_ERROR(CheckAborted());
  const TensorDesc all_sums = MakeTensor(sums, DType::kFloat32, Shape{sets * 2});
  RETURN_IF_ERROR(comm_->AllReduce(all_sums, ReduceOp::kSum, stream_));
  // Under hybrid sharding the other shard groups scored other sequences.
  if (replica_comm_ != nullptr) {
    RETURN_IF_ERROR(replica_comm_->AllReduce(all_sums, ReduceOp::kSum, stream_));
  }
  RETURN_IF_ERROR(EndForwardPass());
  std::vector<float> host(static_cast<size_t>(sets * 2));
  RETURN_IF_ERROR(ops.CopyToHost(host.data(), sums, host.size() * sizeof(float), stream_));
  RETURN_IF_ERROR(ops.Synchronize(stream_));
  RETURN_IF_ERROR(comm_->FirstFailure());
  if (replica_comm_ != nullptr) RETURN_IF_ERROR(replica_comm_->FirstFailure());
  ValidationReport report;
  // The total over every set, summed in set order (one set: exactly its sums).
  float loss_sum = 0.f, valid_tokens = 0.f;
  for (int64_t set = 0; set < sets; ++set) {
    const float set_loss = host[2 * set + kLossSum], set_tokens = host[2 * set + kValidTokens];
    loss_sum += set_loss;
    valid_tokens += set_tokens;
    if (!validation_sets_[set].source_path.empty()) {
      report.sources.push_back({validation_sets_[set].source_path,
                                set_loss / std::max(1.0f, set_tokens),
                                static_cast<int64_t>(set_tokens)});
    }
  }
  report.loss = loss_sum / std::max(1.0f, valid_tokens);
  report.tokens = static_cast<int64_t>(valid_tokens);
  return report;
}

}  // namespace tessera

// The trainer's FSDP2 collectives, as grouped, deferred operations: each
// block's six parameters move in one all-gather and their gradients in one
// reduce-scatter (one NCCL launch each), queued after the compute stream's
// work so far and waited for by the step only where it reads the result.
// train_step.cc decides what overlaps with what; these functions only say
// which buffers move. At world size 1 there is nothing to move: the
// gathered weights and full gradients are views of the shards. Under hybrid
// sharding these run in the shard group, and the gradient shards are then
// all-reduced across the replica group.
#include <array>
#include <initializer_list>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "common/status_macros.h"
#include "worker/trainer/fsdp_trainer.h"

namespace tessera {

absl::StatusOr<CollectiveTicket> FsdpTrainer::StartGather(
    std::initializer_list<std::pair<const Fp8ShardedParam*, const DeviceTensor*>> params) {
  if (world_ == 1) return CollectiveTicket{};
  absl::InlinedVector<AllGatherPart, 4> parts;
  for (const auto& [param, gathered] : params) {
    ASSIGN_OR_RETURN(AllGatherPart part, GatherPart(*param, world_, gathered->desc));
    parts.push_back(part);
  }
  return comm_->StartAllGather(parts, stream_);
}

absl::StatusOr<CollectiveTicket> FsdpTrainer::StartGatherBlock(int layer, GatheredBlock& out) {
  if (world_ == 1) return CollectiveTicket{};
  const Block& b = blocks_[layer];
  std::array<AllGatherPart, 6> parts;
  for (int i = 0; i < 6; ++i) {
    ASSIGN_OR_RETURN(parts[i], GatherPart(b.*kBlockParams[i], world_, (out.*kBlockTensors[i]).desc));
  }
  return comm_->StartAllGather(parts, stream_);
}

absl::Status FsdpTrainer::GatherBlock(int layer, GatheredBlock& out) {
  ASSIGN_OR_RETURN(const CollectiveTicket gathered, StartGatherBlock(layer, out));
  return comm_->WaitFor(gathered, stream_);
}

absl::StatusOr<CollectiveTicket> FsdpTrainer::StartReduceScatterBlock(int layer) {
  if (world_ == 1) return CollectiveTicket{};
  const Block& b = blocks_[layer];
  const BlockGrads& grads = GradsFor(layer);
  std::array<ReduceScatterPart, 6> parts;
  for (int i = 0; i < 6; ++i) parts[i] = ScatterPart(b.*kBlockParams[i], (grads.*kBlockTensors[i]).desc);
  return comm_->StartReduceScatter(parts, stream_);
}

absl::StatusOr<CollectiveTicket> FsdpTrainer::StartReduceScatter(
    std::initializer_list<std::pair<const Fp8ShardedParam*, const DeviceTensor*>> grads) {
  if (world_ == 1) return CollectiveTicket{};
  absl::InlinedVector<ReduceScatterPart, 4> parts;
  for (const auto& [param, full_grad] : grads) parts.push_back(ScatterPart(*param, full_grad->desc));
  return comm_->StartReduceScatter(parts, stream_);
}

absl::Status FsdpTrainer::ReduceAcrossReplicas(int layer, const CollectiveTicket& reduced) {
  if (replica_comm_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(comm_->WaitFor(reduced, stream_));
  absl::InlinedVector<TensorDesc, 6> shards;
  if (layer >= 0) {
    for (Fp8ShardedParam Block::*member : kBlockParams) {
      shards.push_back((blocks_[layer].*member).grad_shard.desc);
    }
    ASSIGN_OR_RETURN(replicas_reduced_[layer],
                     replica_comm_->StartAllReduce(shards, ReduceOp::kSum, stream_));
  } else {
    for (const Fp8ShardedParam* p : {&embedding_, &final_norm_, &lm_head_}) {
      shards.push_back(p->grad_shard.desc);
    }
    ASSIGN_OR_RETURN(outer_replicas_reduced_,
                     replica_comm_->StartAllReduce(shards, ReduceOp::kSum, stream_));
  }
  return absl::OkStatus();
}

absl::Status FsdpTrainer::WaitForReplicas() {
  if (replica_comm_ == nullptr) return absl::OkStatus();
  for (const CollectiveTicket& t : replicas_reduced_) {
    RETURN_IF_ERROR(replica_comm_->WaitFor(t, stream_));
  }
  return replica_comm_->WaitFor(outer_replicas_reduced_, stream_);
}

absl::StatusOr<std::vector<uint8_t>> FsdpTrainer::GatheredWeightBytes(int layer,
                                                                    BlockLinear linear) {
  if (!collective_ready_) return absl::FailedPreconditionError("collectives not ready");
  if (layer < 0 || layer >= layers_) return absl::InvalidArgumentError("layer out of range");
  RETURN_IF_ERROR(GatherBlock(layer, GatheredFor(layer)));
  const DeviceTensor& gathered = GatheredFor(layer).linear(linear);
  const Fp8ShardedParam& p = blocks_[layer].linear(linear);
  std::vector<uint8_t> bytes(p.rows * p.cols * DTypeSize(p.compute_dtype));
  RETURN_IF_ERROR(ops_->CopyToHost(bytes.data(), gathered.desc.data, bytes.size(), stream_));
  return bytes;
}

absl::StatusOr<std::vector<uint8_t>> FsdpTrainer::GradientBytes() {
  std::vector<const DeviceTensor*> grads = {&embedding_.grad_shard, &final_norm_.grad_shard,
                                            &lm_head_.grad_shard};
  for (const Block& block : blocks_) {
    for (auto param : kBlockParams) grads.push_back(&(block.*param).grad_shard);
  }
  for (const DeviceTensor* full : {&grad_embedding_, &grad_final_norm_, &grad_lm_head_}) {
    grads.push_back(full);
  }
  for (const BlockGrads& set : block_grads_) {
    for (auto tensor : kBlockTensors) grads.push_back(&(set.*tensor));
  }
  std::vector<uint8_t> bytes;
  for (const DeviceTensor* t : grads) {
    if (t->desc.data == nullptr) continue;  // grad_embedding_ of a sharded run: none
    const size_t offset = bytes.size();
    bytes.resize(offset + t->desc.Bytes());
    RETURN_IF_ERROR(
        ops_->CopyToHost(bytes.data() + offset, t->desc.data, t->desc.Bytes(), stream_));
  }
  return bytes;
}

}  // namespace tessera

// The packed FP8 quantizer state of a model, built once at setup, in the
// layout common/fp8_meta_layout.h describes (which slot belongs to which
// tensor of which linear, where each value sits in the engine's block and
// in a checkpoint). The whole state is one engine allocation, so all
// amaxes of a step are combined across ranks by ONE all-reduce (max) and
// all scales are updated by one UpdateFp8Scales call per format.
// Checkpoints keep the compact layout of earlier releases (ToCheckpoint /
// FromCheckpoint), so a checkpoint written before this layout still resumes.
//
// weight_data_scale_inv holds 1/scale that each weight's current FP8 bytes
// were encoded with (FusedAdam encodes with this step's scale, before the
// update), which is what the next GEMM must use. RecordWeightEncodeScales
// sets it on every rank, including ranks whose shard of a weight is empty
// and which therefore encoded nothing.
//
// When each scale is used, delayed scaling (TransformerEngine's recipe):
//  * Step k's activations and gradients are quantized with the scales
//    computed at the end of step k-1 from the history as it stood then
//    (amaxes of steps k-H..k-1); their own amaxes are recorded by the fused
//    Quantize and only enter the history at the end of step k. Step 0 uses
//    scale 1.
//  * Weights: setup all-reduces the amax of the initial masters and encodes
//    the shards with the resulting scale. In step k, FusedAdam re-encodes
//    the new master with the scale from the end of step k-1 (which the
//    gathered bytes of step k+1 therefore carry in weight_data_scale_inv)
//    and records the new masters' amax.
//  * End of step: one AllReduce(max) over every amax, then one
//    UpdateFp8Scales per format rolls the histories and recomputes every
//    scale. All ranks hold identical scales, so a gathered FP8 weight is
//    decoded with one scale_inv that every rank already has: only the FP8
//    bytes travel in the all-gather.
// Current scaling (history 1, most recent):
//  * Activations and gradients take the amax of the tensor itself right
//    before quantizing (UpdateScale of one slot). The amax is the rank's
//    LOCAL one, not all-reduced: a sharded run therefore quantizes
//    activations slightly differently from a 1-rank run with the same global
//    batch (it stays within the FP8 tolerance, not bit-exact); an extra
//    all-reduce per linear would restore exactness at the cost of a
//    collective on the critical path.
//  * Weights: after FusedAdam and the packed all-reduce, the trainer runs a
//    separate pass re-quantizing every FP8 shard from its master with the
//    scale of the all-reduced new amax, so weights use their exact current
//    scale and stay identical on all ranks.
#ifndef TESSERA_WORKER_MODEL_FP8_META_H_
#define TESSERA_WORKER_MODEL_FP8_META_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/fp8_meta_layout.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/ops/device_tensor.h"

namespace tessera {

class Fp8Meta {
 public:
  static constexpr int kScaleInvStride = Fp8MetaLayout::kScaleInvStride;

  // The state of a model of `n_layers` blocks under `recipe`.
  static absl::StatusOr<Fp8Meta> Create(Ops& ops, int n_layers, const v1::Fp8Recipe& recipe);

  const Fp8MetaLayout& layout() const { return layout_; }

  // The values of one slot (engine memory).
  float* amax(E4m3Slot slot) const { return at(layout_.amax_offset() + slot.index); }
  float* amax(E5m2Slot slot) const {
    return at(layout_.amax_offset() + layout_.e4m3_slots() + slot.index);
  }
  float* scale(E4m3Slot slot) const { return at(layout_.scale4_offset() + slot.index); }
  float* scale(E5m2Slot slot) const { return at(layout_.scale5_offset() + slot.index); }
  float* scale_inv(E4m3Slot slot) const {
    return at(layout_.scale_inv4_offset() + int64_t{kScaleInvStride} * slot.index);
  }
  float* scale_inv(E5m2Slot slot) const {
    return at(layout_.scale_inv5_offset() + int64_t{kScaleInvStride} * slot.index);
  }
  // 1/scale the weight's current FP8 bytes were encoded with.
  float* weight_data_scale_inv(LinearId id) const {
    return at(layout_.weight_data_scale_inv_offset() + int64_t{kScaleInvStride} * id.index());
  }
  // All amaxes, contiguous, for the packed all-reduce.
  TensorDesc amaxes() const {
    return MakeTensor(at(layout_.amax_offset()), DType::kFloat32,
                      Shape{layout_.e4m3_slots() + layout_.e5m2_slots()});
  }

  // Rolls histories and recomputes every scale from the (all-reduced) amaxes.
  absl::Status UpdateScales(Ops& ops, Stream* stream);
  // Call right after the FP8 weight shards were (re-)encoded with the
  // weights' current scales: copies their 1/scale (one contiguous copy) into
  // weight_data_scale_inv, identically on every rank.
  absl::Status RecordWeightEncodeScales(Ops& ops, Stream* stream);
  bool current_scaling() const { return current_; }
  // The whole packed block (amaxes, scales, histories) in the engine's
  // layout, to save and restore it within a process.
  const TensorDesc& packed() const { return block_.desc; }
  // The block in the compact checkpoint layout.
  int64_t checkpoint_floats() const { return layout_.checkpoint_floats(); }
  absl::StatusOr<std::vector<float>> ToCheckpoint(Ops& ops) const;
  // bytes: checkpoint_floats() little-endian floats in the checkpoint layout.
  absl::Status FromCheckpoint(Ops& ops, const void* bytes);
  // Current scaling: sets one slot's scale from its own amax right away.
  absl::Status UpdateScale(Ops& ops, E4m3Slot slot, Stream* stream);
  absl::Status UpdateScale(Ops& ops, E5m2Slot slot, Stream* stream);

 private:
  explicit Fp8Meta(Fp8MetaLayout layout) : layout_(layout) {}
  float* at(int64_t offset) const { return block_.data<float>() + offset; }

  Fp8MetaLayout layout_;
  DeviceTensor block_;  // [layout_.engine_floats()] fp32
  int margin_ = 0;
  AmaxAlgo algo_ = AmaxAlgo::kMax;
  bool current_ = false;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_FP8_META_H_

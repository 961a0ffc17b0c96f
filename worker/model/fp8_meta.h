// The packed FP8 quantizer state of a model, built once at setup. Slots,
// for n block linears:
//   e4m3 group: the linears' weights [0, n), then their input activations
//               [n, 2n)
//   e5m2 group: the linears' output gradients [0, n)
// Layout in one engine allocation, so that all amaxes of a step are combined
// across ranks by ONE all-reduce (max) and all scales are updated by one
// UpdateFp8Scales call per group:
//   scale_inv4[n4 x 4] | scale_inv5[n5 x 4] | weight_data_scale_inv[n5 x 4]
//   | amax[n4 + n5] | scale4[n4] | history4[H, n4] | scale5[n5] | history5[H, n5]
// Every scale_inv sits alone in 16 bytes (kScaleInvStride floats): an FP8
// GEMM hands it to cuBLASLt as the operand's scale pointer, which cuBLASLt
// requires to be 16-byte aligned, so no GEMM needs a copy of its scales.
// Checkpoints keep the compact layout of earlier releases (ToCheckpoint /
// FromCheckpoint), so a checkpoint written before this layout still resumes:
//   amax[n4 + n5] | scale4[n4] | scale_inv4[n4] | history4[H, n4]
//                 | scale5[n5] | scale_inv5[n5] | history5[H, n5]
//                 | weight_data_scale_inv[n5]
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
//  * End of step: one AllReduce(max) over amax[0, n4 + n5), then one
//    UpdateFp8Scales per group rolls the histories and recomputes every
//    scale. All ranks hold identical scales, so a gathered FP8 weight is
//    decoded with one scale_inv that every rank already has: only the FP8
//    bytes travel in the all-gather.
// Current scaling (history 1, most recent):
//  * Activations and gradients take the amax of the tensor itself right
//    before quantizing (UpdateInputSlot / UpdateGradSlot). The amax is the
//    rank's LOCAL one, not all-reduced: a sharded run therefore quantizes
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
#include "proto/tessera/v1/job.pb.h"
#include "worker/ops/device_tensor.h"

namespace tessera {

class Fp8Meta {
 public:
  // Floats between consecutive scale_inv values: 16 bytes.
  static constexpr int kScaleInvStride = 4;

  static absl::StatusOr<Fp8Meta> Create(Ops& ops, int n_linears, const v1::Fp8Recipe& recipe);

  int n4() const { return n4_; }
  int n5() const { return n5_; }
  // Slots of linear i.
  int weight_slot(int i) const { return i; }
  int input_slot(int i) const { return n5_ + i; }

  float* amax4(int slot) const { return amax_ + slot; }
  float* scale4(int slot) const { return scale4_ + slot; }
  float* scale_inv4(int slot) const { return scale_inv4_ + kScaleInvStride * slot; }
  float* amax5(int linear) const { return amax_ + n4_ + linear; }
  float* scale5(int linear) const { return scale5_ + linear; }
  float* scale_inv5(int linear) const { return scale_inv5_ + kScaleInvStride * linear; }
  float* weight_data_scale_inv(int linear) const {
    return weight_data_scale_inv_ + kScaleInvStride * linear;
  }
  // All amaxes, contiguous, for the packed all-reduce.
  TensorDesc amaxes() const { return MakeTensor(amax_, DType::kFloat32, Shape{n4_ + n5_}); }

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
  // The block in the compact checkpoint layout (see the top of this file).
  int64_t checkpoint_floats() const;
  absl::StatusOr<std::vector<float>> ToCheckpoint(Ops& ops) const;
  // bytes: checkpoint_floats() little-endian floats in the checkpoint layout.
  absl::Status FromCheckpoint(Ops& ops, const void* bytes);
  // Current scaling: sets one slot's scale from its own amax right away.
  absl::Status UpdateInputSlot(Ops& ops, int slot, Stream* stream);
  absl::Status UpdateGradSlot(Ops& ops, int linear, Stream* stream);

 private:
  DeviceTensor block_;
  int n4_ = 0, n5_ = 0, history_len_ = 1, margin_ = 0;
  AmaxAlgo algo_ = AmaxAlgo::kMax;
  bool current_ = false;
  float *amax_ = nullptr, *scale4_ = nullptr, *scale_inv4_ = nullptr, *history4_ = nullptr;
  float *scale5_ = nullptr, *scale_inv5_ = nullptr, *history5_ = nullptr;
  float* weight_data_scale_inv_ = nullptr;

  // Calls visit(index into the block) for each float of the checkpoint
  // layout, in that layout's order.
  template <typename Visit>
  void ForEachCheckpointValue(Visit visit) const;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_FP8_META_H_

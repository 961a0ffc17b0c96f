// The packed FP8 quantizer state of a model, built once at setup. Slots:
//   e4m3 group: per block linear, its weight and its input activation
//   e5m2 group: per block linear, its output gradient
// Layout in one engine allocation, so that all amaxes of a step are combined
// across ranks by ONE all-reduce (max) and all scales are updated by one
// UpdateFp8Scales call per group:
//   amax[n4 + n5] | scale4[n4] | scale_inv4[n4] | history4[H, n4]
//                 | scale5[n5] | scale_inv5[n5] | history5[H, n5]
//                 | weight_data_scale_inv[n_weights]
// weight_data_scale_inv holds 1/scale that each weight's current FP8 bytes
// were encoded with (FusedAdam encodes with this step's scale, before the
// update), which is what the next GEMM must use.
#ifndef TESSERA_WORKER_MODEL_FP8_META_H_
#define TESSERA_WORKER_MODEL_FP8_META_H_

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/ops/device_tensor.h"

namespace tessera {

class Fp8Meta {
 public:
  static absl::StatusOr<Fp8Meta> Create(Ops& ops, int n_linears, const v1::Fp8Recipe& recipe);

  int n4() const { return n4_; }
  int n5() const { return n5_; }
  // Slots of linear i.
  int weight_slot(int i) const { return 2 * i; }
  int input_slot(int i) const { return 2 * i + 1; }

  float* amax4(int slot) const { return amax_ + slot; }
  float* scale4(int slot) const { return scale4_ + slot; }
  float* scale_inv4(int slot) const { return scale_inv4_ + slot; }
  float* amax5(int linear) const { return amax_ + n4_ + linear; }
  float* scale5(int linear) const { return scale5_ + linear; }
  float* scale_inv5(int linear) const { return scale_inv5_ + linear; }
  float* weight_data_scale_inv(int linear) const { return weight_data_scale_inv_ + linear; }
  // All amaxes, contiguous, for the packed all-reduce.
  TensorDesc amaxes() const { return MakeTensor(amax_, DType::kFloat32, Shape{n4_ + n5_}); }

  // Rolls histories and recomputes every scale from the (all-reduced) amaxes.
  absl::Status UpdateScales(Ops& ops, Stream* stream);
  bool current_scaling() const { return current_; }
  // The whole packed block (amaxes, scales, histories), for checkpoints.
  const TensorDesc& packed() const { return block_.desc; }
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
};

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_FP8_META_H_

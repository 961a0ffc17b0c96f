// Fp8MetaLayout: where every FP8 quantizer value of a model lives, written
// once. The engine's packed block (worker/model/fp8_meta.h), the checkpoint
// (which keeps the compact order of earlier releases) and the memory
// estimate (memory_estimate.cc) all read it from here.
//
// Each of the n = 4 * n_layers block linears has three FP8 tensors, so
// three quantizer slots:
//   e4m3 slots [0, n):  the linears' weights      (WeightSlot)
//   e4m3 slots [n, 2n): the linears' inputs       (InputSlot)
//   e5m2 slots [0, n):  the linears' output grads (GradSlot)
// The two formats' slots are distinct types, so a slot of one cannot index
// the other's values.
//
// Engine block, in floats; every scale_inv sits alone in 16 bytes
// (kScaleInvStride floats) because cuBLASLt takes it as an FP8 operand's
// scale pointer and needs it 16-byte aligned:
//   scale_inv4[2n x 4] | scale_inv5[n x 4] | weight_data_scale_inv[n x 4]
//   | amax[2n + n] | scale4[2n] | history4[H, 2n] | scale5[n] | history5[H, n]
// amax4 and amax5 are contiguous so one all-reduce (max) combines a step's
// amaxes across ranks.
// Checkpoint, in floats (no padding):
//   amax[3n] | scale4[2n] | scale_inv4[2n] | history4[H, 2n]
//   | scale5[n] | scale_inv5[n] | history5[H, n] | weight_data_scale_inv[n]
#ifndef TESSERA_COMMON_FP8_META_LAYOUT_H_
#define TESSERA_COMMON_FP8_META_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// The linears of a transformer block, in the order the block runs them.
enum class BlockLinear : int { kQkv = 0, kOutProj = 1, kGateUp = 2, kDown = 3 };
inline constexpr int kBlockLinears = 4;
inline constexpr BlockLinear kEveryBlockLinear[kBlockLinears] = {
    BlockLinear::kQkv, BlockLinear::kOutProj, BlockLinear::kGateUp, BlockLinear::kDown};

// "qkv", "out_proj", "gate_up", "down": the parameter names of the model.
const char* BlockLinearName(BlockLinear linear);

// Per-block-linear storage, indexed by BlockLinear.
template <typename T>
struct PerBlockLinear {
  T values[kBlockLinears];
  T& operator[](BlockLinear l) { return values[static_cast<int>(l)]; }
  const T& operator[](BlockLinear l) const { return values[static_cast<int>(l)]; }
};

// One block linear of the model.
struct LinearId {
  int layer = 0;
  BlockLinear linear = BlockLinear::kQkv;
  // Its place among the model's linears: layer-major, then BlockLinear.
  int index() const { return layer * kBlockLinears + static_cast<int>(linear); }
};

struct E4m3Slot {
  int index = 0;
};
struct E5m2Slot {
  int index = 0;
};

class Fp8MetaLayout {
 public:
  // Floats between consecutive scale_inv values: 16 bytes.
  static constexpr int kScaleInvStride = 4;
  // job.proto: amax_history_len 0 means 16.
  static constexpr int kDefaultHistoryLen = 16;

  // The layout of a model of `n_layers` blocks under `recipe` (current
  // scaling keeps a history of 1).
  static Fp8MetaLayout For(int n_layers, const v1::Fp8Recipe& recipe);
  Fp8MetaLayout(int n_layers, int history_len);

  int linears() const { return linears_; }
  int e4m3_slots() const { return 2 * linears_; }
  int e5m2_slots() const { return linears_; }
  int history_len() const { return history_len_; }

  E4m3Slot WeightSlot(LinearId id) const { return E4m3Slot{id.index()}; }
  E4m3Slot InputSlot(LinearId id) const { return E4m3Slot{linears_ + id.index()}; }
  E5m2Slot GradSlot(LinearId id) const { return E5m2Slot{id.index()}; }

  // Engine block offsets, in floats.
  int64_t scale_inv4_offset() const { return 0; }
  int64_t scale_inv5_offset() const { return scale_inv4_offset() + kScaleInvStride * e4m3_slots(); }
  int64_t weight_data_scale_inv_offset() const {
    return scale_inv5_offset() + kScaleInvStride * e5m2_slots();
  }
  int64_t amax_offset() const { return weight_data_scale_inv_offset() + kScaleInvStride * linears_; }
  int64_t scale4_offset() const { return amax_offset() + e4m3_slots() + e5m2_slots(); }
  int64_t history4_offset() const { return scale4_offset() + e4m3_slots(); }
  int64_t scale5_offset() const { return history4_offset() + int64_t{history_len_} * e4m3_slots(); }
  int64_t history5_offset() const { return scale5_offset() + e5m2_slots(); }
  int64_t engine_floats() const { return history5_offset() + int64_t{history_len_} * e5m2_slots(); }

  // The compact checkpoint: its size, and the engine offset of each of its
  // floats in checkpoint order.
  int64_t checkpoint_floats() const;
  std::vector<int64_t> CheckpointOrder() const;

 private:
  int linears_ = 0, history_len_ = 1;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_FP8_META_LAYOUT_H_

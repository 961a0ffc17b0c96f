// Packed FP8 quantizer state (see fp8_meta.h; the layout is
// common/fp8_meta_layout.h).
#include "worker/model/fp8_meta.h"

#include <cstring>
#include <vector>

namespace tessera {
namespace {

constexpr float kE4m3Max = 448.0f, kE5m2Max = 57344.0f;

}  // namespace

absl::StatusOr<Fp8Meta> Fp8Meta::Create(Ops& ops, int n_layers, const v1::Fp8Recipe& recipe) {
  Fp8Meta m(Fp8MetaLayout::For(n_layers, recipe));
  if (recipe.has_current()) {
    m.current_ = true;
    m.margin_ = recipe.current().margin();
    m.algo_ = AmaxAlgo::kMostRecent;
  } else {
    m.margin_ = recipe.delayed().margin();
    m.algo_ = recipe.delayed().amax_compute() == v1::DelayedScaling::MOST_RECENT
                  ? AmaxAlgo::kMostRecent
                  : AmaxAlgo::kMax;
  }
  const Fp8MetaLayout& layout = m.layout_;
  const int64_t total = layout.engine_floats();
  absl::StatusOr<DeviceTensor> block = AllocateTensor(ops, DType::kFloat32, Shape{total});
  if (!block.ok()) return block.status();
  m.block_ = std::move(*block);
  // Scales and their inverses start at 1 (setup replaces the weights' from
  // their real amax); amaxes and histories at 0. The padding of the
  // scale_inv slots is 0 and never read.
  std::vector<float> host(total, 0.f);
  const auto one = [&](int64_t offset) { host[offset] = 1.f; };
  for (int i = 0; i < layout.e4m3_slots(); ++i) {
    one(layout.scale4_offset() + i);
    one(layout.scale_inv4_offset() + int64_t{kScaleInvStride} * i);
  }
  for (int i = 0; i < layout.e5m2_slots(); ++i) {
    one(layout.scale5_offset() + i);
    one(layout.scale_inv5_offset() + int64_t{kScaleInvStride} * i);
  }
  for (int i = 0; i < layout.linears(); ++i) {
    one(layout.weight_data_scale_inv_offset() + int64_t{kScaleInvStride} * i);
  }
  absl::Status s = ops.CopyToDevice(m.block_.desc.data, host.data(), total * sizeof(float), nullptr);
  if (!s.ok()) return s;
  return m;
}

absl::StatusOr<std::vector<float>> Fp8Meta::ToCheckpoint(Ops& ops) const {
  std::vector<float> engine(block_.desc.NumElements());
  absl::Status s = ops.CopyToHost(engine.data(), block_.desc.data, block_.desc.Bytes(), nullptr);
  if (s.ok()) s = ops.Synchronize(nullptr);
  if (!s.ok()) return s;
  std::vector<float> compact;
  compact.reserve(checkpoint_floats());
  for (int64_t at : layout_.CheckpointOrder()) compact.push_back(engine[at]);
  return compact;
}

absl::Status Fp8Meta::FromCheckpoint(Ops& ops, const void* bytes) {
  std::vector<float> compact(checkpoint_floats());
  std::memcpy(compact.data(), bytes, compact.size() * sizeof(float));
  std::vector<float> engine(block_.desc.NumElements(), 0.f);
  int64_t next = 0;
  for (int64_t at : layout_.CheckpointOrder()) engine[at] = compact[next++];
  absl::Status s = ops.CopyToDevice(block_.desc.data, engine.data(), block_.desc.Bytes(), nullptr);
  if (!s.ok()) return s;
  return ops.Synchronize(nullptr);
}

absl::Status Fp8Meta::UpdateScales(Ops& ops, Stream* stream) {
  const int n4 = layout_.e4m3_slots(), n5 = layout_.e5m2_slots(), h = layout_.history_len();
  absl::Status s = ops.UpdateFp8Scales(amax(E4m3Slot{0}), at(layout_.history4_offset()),
                                       scale(E4m3Slot{0}), scale_inv(E4m3Slot{0}),
                                       kScaleInvStride, n4, h, kE4m3Max, margin_, algo_, stream);
  if (!s.ok()) return s;
  return ops.UpdateFp8Scales(amax(E5m2Slot{0}), at(layout_.history5_offset()), scale(E5m2Slot{0}),
                             scale_inv(E5m2Slot{0}), kScaleInvStride, n5, h, kE5m2Max, margin_,
                             algo_, stream);
}

absl::Status Fp8Meta::RecordWeightEncodeScales(Ops& ops, Stream* stream) {
  // The weight slots are the first linears() e4m3 slots, in linear order,
  // as weight_data_scale_inv is.
  return ops.CopyDeviceToDevice(weight_data_scale_inv(LinearId{}), scale_inv(E4m3Slot{0}),
                                int64_t{kScaleInvStride} * layout_.linears() * sizeof(float),
                                stream);
}

absl::Status Fp8Meta::UpdateScale(Ops& ops, E4m3Slot slot, Stream* stream) {
  return ops.UpdateFp8Scales(amax(slot), at(layout_.history4_offset() + slot.index), scale(slot),
                             scale_inv(slot), kScaleInvStride, 1, 1, kE4m3Max, margin_,
                             AmaxAlgo::kMostRecent, stream);
}

absl::Status Fp8Meta::UpdateScale(Ops& ops, E5m2Slot slot, Stream* stream) {
  return ops.UpdateFp8Scales(amax(slot), at(layout_.history5_offset() + slot.index), scale(slot),
                             scale_inv(slot), kScaleInvStride, 1, 1, kE5m2Max, margin_,
                             AmaxAlgo::kMostRecent, stream);
}

}  // namespace tessera

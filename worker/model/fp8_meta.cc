// Packed FP8 quantizer state (see fp8_meta.h).
#include "worker/model/fp8_meta.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tessera {
namespace {

constexpr int kDefaultHistoryLen = 16;  // job.proto: amax_history_len 0 means 16

}  // namespace

absl::StatusOr<Fp8Meta> Fp8Meta::Create(Ops& ops, int n_linears, const v1::Fp8Recipe& recipe) {
  Fp8Meta m;
  m.n4_ = 2 * n_linears;
  m.n5_ = n_linears;
  if (recipe.has_current()) {
    m.current_ = true;
    m.history_len_ = 1;
    m.margin_ = recipe.current().margin();
    m.algo_ = AmaxAlgo::kMostRecent;
  } else {
    const int history = recipe.delayed().amax_history_len();
    m.history_len_ = history > 0 ? history : kDefaultHistoryLen;
    m.margin_ = recipe.delayed().margin();
    m.algo_ = recipe.delayed().amax_compute() == v1::DelayedScaling::MOST_RECENT
                  ? AmaxAlgo::kMostRecent
                  : AmaxAlgo::kMax;
  }
  const int64_t total = int64_t{kScaleInvStride} * (m.n4_ + 2 * m.n5_) + (m.n4_ + m.n5_) +
                        m.n4_ * (1 + m.history_len_) + m.n5_ * (1 + m.history_len_);
  absl::StatusOr<DeviceTensor> block = AllocateTensor(ops, DType::kFloat32, Shape{total});
  if (!block.ok()) return block.status();
  m.block_ = std::move(*block);
  float* base = m.block_.data<float>();
  float* p = base;
  m.scale_inv4_ = p;
  p += kScaleInvStride * m.n4_;
  m.scale_inv5_ = p;
  p += kScaleInvStride * m.n5_;
  m.weight_data_scale_inv_ = p;
  p += kScaleInvStride * m.n5_;
  m.amax_ = p;
  p += m.n4_ + m.n5_;
  m.scale4_ = p;
  p += m.n4_;
  m.history4_ = p;
  p += m.n4_ * m.history_len_;
  m.scale5_ = p;
  p += m.n5_;
  m.history5_ = p;
  // Scales and their inverses start at 1 (setup replaces the weights' from
  // their real amax); amaxes and histories at 0. The padding of the
  // scale_inv slots is 0 and never read.
  std::vector<float> host(total, 0.f);
  const auto at = [&](const float* q) { return q - base; };
  for (int i = 0; i < m.n4_; ++i) host[at(m.scale_inv4(i))] = host[at(m.scale4(i))] = 1.f;
  for (int i = 0; i < m.n5_; ++i) {
    host[at(m.scale_inv5(i))] = host[at(m.scale5(i))] = 1.f;
    host[at(m.weight_data_scale_inv(i))] = 1.f;
  }
  absl::Status s = ops.CopyToDevice(m.block_.desc.data, host.data(), total * sizeof(float), nullptr);
  if (!s.ok()) return s;
  return m;
}

int64_t Fp8Meta::checkpoint_floats() const {
  return (n4_ + n5_) + n4_ * (2 + history_len_) + n5_ * (2 + history_len_) + n5_;
}

template <typename Visit>
void Fp8Meta::ForEachCheckpointValue(Visit visit) const {
  const float* base = block_.data<float>();
  const auto run = [&](const float* first, int64_t count, int stride) {
    for (int64_t i = 0; i < count; ++i) visit((first - base) + i * stride);
  };
  run(amax_, n4_ + n5_, 1);
  run(scale4_, n4_, 1);
  run(scale_inv4_, n4_, kScaleInvStride);
  run(history4_, int64_t{n4_} * history_len_, 1);
  run(scale5_, n5_, 1);
  run(scale_inv5_, n5_, kScaleInvStride);
  run(history5_, int64_t{n5_} * history_len_, 1);
  run(weight_data_scale_inv_, n5_, kScaleInvStride);
}

absl::StatusOr<std::vector<float>> Fp8Meta::ToCheckpoint(Ops& ops) const {
  std::vector<float> engine(block_.desc.NumElements());
  absl::Status s = ops.CopyToHost(engine.data(), block_.desc.data, block_.desc.Bytes(), nullptr);
  if (s.ok()) s = ops.Synchronize(nullptr);
  if (!s.ok()) return s;
  std::vector<float> compact;
  compact.reserve(checkpoint_floats());
  ForEachCheckpointValue([&](int64_t at) { compact.push_back(engine[at]); });
  return compact;
}

absl::Status Fp8Meta::FromCheckpoint(Ops& ops, const void* bytes) {
  std::vector<float> compact(checkpoint_floats());
  std::memcpy(compact.data(), bytes, compact.size() * sizeof(float));
  std::vector<float> engine(block_.desc.NumElements(), 0.f);
  int64_t next = 0;
  ForEachCheckpointValue([&](int64_t at) { engine[at] = compact[next++]; });
  absl::Status s = ops.CopyToDevice(block_.desc.data, engine.data(), block_.desc.Bytes(), nullptr);
  if (!s.ok()) return s;
  return ops.Synchronize(nullptr);
}

absl::Status Fp8Meta::UpdateScales(Ops& ops, Stream* stream) {
  absl::Status s = ops.UpdateFp8Scales(amax_, history4_, scale4_, scale_inv4_, kScaleInvStride,
                                       n4_, history_len_, 448.0f, margin_, algo_, stream);
  if (!s.ok()) return s;
  return ops.UpdateFp8Scales(amax_ + n4_, history5_, scale5_, scale_inv5_, kScaleInvStride, n5_,
                             history_len_, 57344.0f, margin_, algo_, stream);
}

absl::Status Fp8Meta::RecordWeightEncodeScales(Ops& ops, Stream* stream) {
  // Weight slots are [0, n5_) of the e4m3 group.
  return ops.CopyDeviceToDevice(weight_data_scale_inv_, scale_inv4_,
                                kScaleInvStride * n5_ * sizeof(float), stream);
}

absl::Status Fp8Meta::UpdateInputSlot(Ops& ops, int slot, Stream* stream) {
  return ops.UpdateFp8Scales(amax4(slot), history4_ + slot, scale4(slot), scale_inv4(slot),
                             kScaleInvStride, 1, 1, 448.0f, margin_, AmaxAlgo::kMostRecent,
                             stream);
}

absl::Status Fp8Meta::UpdateGradSlot(Ops& ops, int linear, Stream* stream) {
  return ops.UpdateFp8Scales(amax5(linear), history5_ + linear, scale5(linear), scale_inv5(linear),
                             kScaleInvStride, 1, 1, 57344.0f, margin_, AmaxAlgo::kMostRecent,
                             stream);
}

}  // namespace tessera

// Packed FP8 quantizer state (see fp8_meta.h).
#include "worker/model/fp8_meta.h"

#include <algorithm>
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
  const int64_t total = (m.n4_ + m.n5_) + m.n4_ * (2 + m.history_len_) +
                        m.n5_ * (2 + m.history_len_) + n_linears;
  absl::StatusOr<DeviceTensor> block = AllocateTensor(ops, DType::kFloat32, Shape{total});
  if (!block.ok()) return block.status();
  m.block_ = std::move(*block);
  float* p = m.block_.data<float>();
  m.amax_ = p;
  p += m.n4_ + m.n5_;
  m.scale4_ = p;
  p += m.n4_;
  m.scale_inv4_ = p;
  p += m.n4_;
  m.history4_ = p;
  p += m.n4_ * m.history_len_;
  m.scale5_ = p;
  p += m.n5_;
  m.scale_inv5_ = p;
  p += m.n5_;
  m.history5_ = p;
  p += m.n5_ * m.history_len_;
  m.weight_data_scale_inv_ = p;
  // Scales start at 1 (setup replaces the weights' from their real amax).
  std::vector<float> host(total, 0.f);
  for (int i = 0; i < 2 * (m.n4_); ++i) host[(m.n4_ + m.n5_) + i] = 1.f;
  const int64_t s5 = (m.n4_ + m.n5_) + m.n4_ * (2 + m.history_len_);
  for (int i = 0; i < 2 * m.n5_; ++i) host[s5 + i] = 1.f;
  for (int i = 0; i < n_linears; ++i) host[total - n_linears + i] = 1.f;
  absl::Status s = ops.CopyToDevice(m.block_.desc.data, host.data(), total * sizeof(float), nullptr);
  if (!s.ok()) return s;
  return m;
}

absl::Status Fp8Meta::UpdateScales(Ops& ops, Stream* stream) {
  absl::Status s = ops.UpdateFp8Scales(amax_, history4_, scale4_, scale_inv4_, n4_, history_len_,
                                       448.0f, margin_, algo_, stream);
  if (!s.ok()) return s;
  return ops.UpdateFp8Scales(amax_ + n4_, history5_, scale5_, scale_inv5_, n5_, history_len_,
                             57344.0f, margin_, algo_, stream);
}

absl::Status Fp8Meta::RecordWeightEncodeScales(Ops& ops, Stream* stream) {
  // Weight slots are [0, n5_) of the e4m3 group.
  return ops.CopyDeviceToDevice(weight_data_scale_inv_, scale_inv4_, n5_ * sizeof(float), stream);
}

absl::Status Fp8Meta::UpdateInputSlot(Ops& ops, int slot, Stream* stream) {
  return ops.UpdateFp8Scales(amax_ + slot, history4_ + slot, scale4_ + slot, scale_inv4_ + slot, 1,
                             1, 448.0f, margin_, AmaxAlgo::kMostRecent, stream);
}

absl::Status Fp8Meta::UpdateGradSlot(Ops& ops, int linear, Stream* stream) {
  return ops.UpdateFp8Scales(amax_ + n4_ + linear, history5_ + linear, scale5_ + linear,
                             scale_inv5_ + linear, 1, 1, 57344.0f, margin_,
                             AmaxAlgo::kMostRecent, stream);
}

}  // namespace tessera

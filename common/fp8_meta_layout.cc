// Fp8MetaLayout's checkpoint order and recipe defaults (see the header).
#include "common/fp8_meta_layout.h"

namespace tessera {

const char* BlockLinearName(BlockLinear linear) {
  switch (linear) {
    case BlockLinear::kQkv:
      return "qkv";
    case BlockLinear::kOutProj:
      return "out_proj";
    case BlockLinear::kGateUp:
      return "gate_up";
    case BlockLinear::kDown:
      return "down";
  }
  return "?";
}

Fp8MetaLayout Fp8MetaLayout::For(int n_layers, const v1::Fp8Recipe& recipe) {
  if (recipe.has_current()) return Fp8MetaLayout(n_layers, 1);
  const int history = recipe.delayed().amax_history_len();
  return Fp8MetaLayout(n_layers, history > 0 ? history : kDefaultHistoryLen);
}

Fp8MetaLayout::Fp8MetaLayout(int n_layers, int history_len)
    : linears_(kBlockLinears * (n_layers > 0 ? n_layers : 0)),
      history_len_(history_len > 0 ? history_len : 1) {}

int64_t Fp8MetaLayout::checkpoint_floats() const {
  const int64_t n4 = e4m3_slots(), n5 = e5m2_slots();
  return (n4 + n5) + n4 * (2 + history_len_) + n5 * (2 + history_len_) + linears_;
}

std::vector<int64_t> Fp8MetaLayout::CheckpointOrder() const {
  std::vector<int64_t> order;
  order.reserve(checkpoint_floats());
  const auto run = [&](int64_t first, int64_t count, int stride) {
    for (int64_t i = 0; i < count; ++i) order.push_back(first + i * stride);
  };
  const int64_t n4 = e4m3_slots(), n5 = e5m2_slots();
  run(amax_offset(), n4 + n5, 1);
  run(scale4_offset(), n4, 1);
  run(scale_inv4_offset(), n4, kScaleInvStride);
  run(history4_offset(), n4 * history_len_, 1);
  run(scale5_offset(), n5, 1);
  run(scale_inv5_offset(), n5, kScaleInvStride);
  run(history5_offset(), n5 * history_len_, 1);
  run(weight_data_scale_inv_offset(), linears_, kScaleInvStride);
  return order;
}

}  // namespace tessera

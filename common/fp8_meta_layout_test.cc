// The FP8 metadata layout: every value has its own place in the engine
// block, the block has no gap but the scale_inv padding, the checkpoint
// order visits every value once, slots follow BlockLinear, and the recipe
// sets the history length.
#include "common/fp8_meta_layout.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(Fp8MetaLayout, SlotsFollowTheBlocksLinears) {
  const Fp8MetaLayout layout(3, 4);
  EXPECT_EQ(layout.linears(), 12);
  EXPECT_EQ(layout.e4m3_slots(), 24);
  EXPECT_EQ(layout.e5m2_slots(), 12);
  const LinearId down_of_block_2{2, BlockLinear::kDown};
  EXPECT_EQ(down_of_block_2.index(), 11);
  EXPECT_EQ(layout.WeightSlot(down_of_block_2).index, 11);
  EXPECT_EQ(layout.InputSlot(down_of_block_2).index, 23);
  EXPECT_EQ(layout.GradSlot(down_of_block_2).index, 11);
  EXPECT_EQ(layout.InputSlot(LinearId{0, BlockLinear::kQkv}).index, 12);
  std::set<int> e4m3;
  for (int layer = 0; layer < 3; ++layer) {
    for (const BlockLinear linear : kEveryBlockLinear) {
      const LinearId id{layer, linear};
      EXPECT_TRUE(e4m3.insert(layout.WeightSlot(id).index).second);
      EXPECT_TRUE(e4m3.insert(layout.InputSlot(id).index).second);
    }
  }
  EXPECT_EQ(static_cast<int>(e4m3.size()), layout.e4m3_slots());
  EXPECT_EQ(*e4m3.rbegin(), layout.e4m3_slots() - 1);
  EXPECT_STREQ(BlockLinearName(BlockLinear::kGateUp), "gate_up");
}

// Marks every float of the engine block with the region that owns it: each
// float has at most one owner, and only scale_inv padding has none.
TEST(Fp8MetaLayout, EngineRegionsTileTheBlock) {
  for (const int layers : {1, 2, 5}) {
    for (const int history : {1, 3, 16}) {
      const Fp8MetaLayout layout(layers, history);
      const int64_t n4 = layout.e4m3_slots(), n5 = layout.e5m2_slots(), n = layout.linears();
      std::vector<int> owners(layout.engine_floats(), 0);
      const auto claim = [&](int64_t first, int64_t count, int stride) {
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_LT(first + i * stride, layout.engine_floats());
          ++owners[first + i * stride];
        }
      };
      claim(layout.scale_inv4_offset(), n4, Fp8MetaLayout::kScaleInvStride);
      claim(layout.scale_inv5_offset(), n5, Fp8MetaLayout::kScaleInvStride);
      claim(layout.weight_data_scale_inv_offset(), n, Fp8MetaLayout::kScaleInvStride);
      claim(layout.amax_offset(), n4 + n5, 1);
      claim(layout.scale4_offset(), n4, 1);
      claim(layout.history4_offset(), n4 * history, 1);
      claim(layout.scale5_offset(), n5, 1);
      claim(layout.history5_offset(), n5 * history, 1);
      int64_t owned = 0;
      for (int64_t at = 0; at < layout.engine_floats(); ++at) {
        EXPECT_LE(owners[at], 1) << "float " << at << " has two owners";
        owned += owners[at];
        if (owners[at] == 0) {
          EXPECT_LT(at, layout.amax_offset()) << "a gap outside the scale_inv padding at " << at;
        }
      }
      // The checkpoint holds every owned float once, padding excluded.
      EXPECT_EQ(owned, layout.checkpoint_floats());
      const std::vector<int64_t> order = layout.CheckpointOrder();
      ASSERT_EQ(static_cast<int64_t>(order.size()), layout.checkpoint_floats());
      std::set<int64_t> seen(order.begin(), order.end());
      EXPECT_EQ(seen.size(), order.size());
      for (const int64_t at : order) EXPECT_EQ(owners[at], 1) << at;
      // Every scale_inv is 16-byte aligned in a 16-byte aligned block.
      EXPECT_EQ(layout.scale_inv5_offset() % Fp8MetaLayout::kScaleInvStride, 0);
      EXPECT_EQ(layout.weight_data_scale_inv_offset() % Fp8MetaLayout::kScaleInvStride, 0);
    }
  }
}

// The checkpoint order of earlier releases: amax, scale4, scale_inv4,
// history4, scale5, scale_inv5, history5, weight_data_scale_inv.
TEST(Fp8MetaLayout, CheckpointKeepsTheCompactOrder) {
  const Fp8MetaLayout layout(1, 2);  // 4 linears: 8 e4m3 slots, 4 e5m2
  const std::vector<int64_t> order = layout.CheckpointOrder();
  ASSERT_EQ(order.size(), 12u + 8 + 8 + 16 + 4 + 4 + 8 + 4);
  EXPECT_EQ(order[0], layout.amax_offset());
  EXPECT_EQ(order[12], layout.scale4_offset());
  EXPECT_EQ(order[20], layout.scale_inv4_offset());
  EXPECT_EQ(order[21], layout.scale_inv4_offset() + 4);
  EXPECT_EQ(order[28], layout.history4_offset());
  EXPECT_EQ(order[44], layout.scale5_offset());
  EXPECT_EQ(order[48], layout.scale_inv5_offset());
  EXPECT_EQ(order[52], layout.history5_offset());
  EXPECT_EQ(order[60], layout.weight_data_scale_inv_offset());
  EXPECT_EQ(order.back(), layout.weight_data_scale_inv_offset() + 12);
}

TEST(Fp8MetaLayout, TheRecipeSetsTheHistory) {
  v1::Fp8Recipe recipe;
  EXPECT_EQ(Fp8MetaLayout::For(2, recipe).history_len(), Fp8MetaLayout::kDefaultHistoryLen);
  recipe.mutable_delayed()->set_amax_history_len(7);
  EXPECT_EQ(Fp8MetaLayout::For(2, recipe).history_len(), 7);
  recipe.mutable_current();
  EXPECT_EQ(Fp8MetaLayout::For(2, recipe).history_len(), 1);
  EXPECT_EQ(Fp8MetaLayout::For(2, recipe).linears(), 8);
}

}  // namespace
}  // namespace tessera

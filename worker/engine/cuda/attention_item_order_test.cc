// The forward's item numbering (attention_item_order.h): every item once,
// groups of K/V heads one after another, heaviest first inside each.
#include "worker/engine/cuda/attention_item_order.h"

#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace cuda {
namespace {

constexpr size_t kH200L2 = 50u << 20;

// Walks every index and checks the numbering's promises; returns the
// items in order.
std::vector<AttentionItem> CheckedItems(const AttentionItemOrder& o, int heads, int batch) {
  std::vector<AttentionItem> items;
  std::set<std::tuple<int, int, int>> seen;
  for (int i = 0; i < o.items(); ++i) {
    const AttentionItem w = AttentionItemOf(i, o);
    EXPECT_GE(w.h, 0);
    EXPECT_LT(w.h, heads);
    EXPECT_GE(w.b, 0);
    EXPECT_LT(w.b, batch);
    EXPECT_GE(w.q_block, 0);
    EXPECT_LT(w.q_block, o.q_blocks);
    EXPECT_TRUE(seen.insert({w.h, w.b, w.q_block}).second)
        << "item " << i << " repeats head " << w.h << ", sequence " << w.b << ", block "
        << w.q_block;
    items.push_back(w);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), heads * batch * o.q_blocks);
  return items;
}

int GroupOf(const AttentionItem& w, const AttentionItemOrder& o) {
  return (w.b * o.kv_heads + w.h / o.group_size) / o.units_per_group;
}

TEST(AttentionItemOrder, OneGroupWhereTheKeysFitIsHeaviestFirstAcrossAllHeads) {
  // 1 x 8192 tokens, 32 query and 8 K/V heads at 128: 32 MB of K and V.
  const AttentionItemOrder o = MakeAttentionItemOrder(1, 32, 8, 8192, 128, 128, kH200L2);
  EXPECT_EQ(o.units_per_group, 8);
  const std::vector<AttentionItem> items = CheckedItems(o, 32, 1);
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].h, static_cast<int>(i % 32));
    EXPECT_EQ(items[i].q_block, 63 - static_cast<int>(i / 32));
  }
}

TEST(AttentionItemOrder, KeysPastTheL2RunAsGroupsOneAfterAnother) {
  // 16384 tokens: 64 MB of K and V, two groups of 4 K/V heads.
  const AttentionItemOrder o = MakeAttentionItemOrder(1, 32, 8, 16384, 128, 128, kH200L2);
  EXPECT_EQ(o.units_per_group, 4);
  const std::vector<AttentionItem> items = CheckedItems(o, 32, 1);
  for (size_t i = 0; i < items.size(); ++i) {
    const int group = GroupOf(items[i], o);
    EXPECT_EQ(group, i < items.size() / 2 ? 0 : 1) << "item " << i;
    if (i > 0 && GroupOf(items[i - 1], o) == group) {
      EXPECT_LE(items[i].q_block, items[i - 1].q_block) << "item " << i << " is heavier";
    }
  }
  EXPECT_EQ(items.front().q_block, 127);
  EXPECT_EQ(items[items.size() / 2].q_block, 127);  // the second group starts heaviest
  EXPECT_EQ(items.back().q_block, 0);
}

TEST(AttentionItemOrder, UnevenLastGroupsAndBatchesCoverEveryItemOnce) {
  // Shapes whose units split unevenly, GQA and MHA, batches, a small L2.
  struct Case {
    int64_t batch;
    int heads, kv_heads;
    int64_t seq;
    int head_dim;
    size_t l2;
  };
  for (const Case& c : {Case{3, 12, 4, 1000, 64, 1u << 20}, Case{5, 6, 6, 4096, 128, 8u << 20},
                        Case{1, 8, 1, 129, 128, 0}, Case{2, 4, 2, 1, 64, 1},
                        Case{8, 16, 16, 2048, 64, kH200L2}}) {
    const AttentionItemOrder o =
        MakeAttentionItemOrder(c.batch, c.heads, c.kv_heads, c.seq, c.head_dim, 128, c.l2);
    ASSERT_GE(o.units_per_group, 1);
    ASSERT_LE(o.units_per_group, o.units);
    const std::vector<AttentionItem> items = CheckedItems(o, c.heads, static_cast<int>(c.batch));
    for (size_t i = 1; i < items.size(); ++i) {
      const int previous = GroupOf(items[i - 1], o), group = GroupOf(items[i], o);
      EXPECT_TRUE(group == previous || group == previous + 1)
          << "item " << i << " goes back to an earlier group";
      if (group == previous) {
        EXPECT_LE(items[i].q_block, items[i - 1].q_block) << "item " << i;
      }
    }
  }
}

TEST(AttentionItemOrder, GroupsKeepTheirKeysWithinThreeQuartersOfTheL2) {
  // 5 units of 2 MB (4096 tokens at 128) against 8 MB of L2: budget 6 MB,
  // so 10 MB make two groups, of 3 and 2 units.
  const AttentionItemOrder o = MakeAttentionItemOrder(5, 6, 1, 4096, 128, 128, 8u << 20);
  EXPECT_EQ(o.units_per_group, 3);
  EXPECT_EQ(AttentionUnitsPerGroup(5, 4096, 128, 0), 5);  // no L2 size known: one group
  EXPECT_EQ(AttentionUnitsPerGroup(0, 4096, 128, 8u << 20), 0);
}

}  // namespace
}  // namespace cuda
}  // namespace tessera

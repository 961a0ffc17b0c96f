// The order in which the attention forward's persistent blocks take their
// items (one head's 128 consecutive queries of one sequence), shared by the
// kernel (flash_attention_forward.cu) and a host test of the numbering.
//
// Items are numbered heaviest first: the last query block of every head
// (causal attention gives it the most key tiles), then the ones before.
// Every item of a K/V head reads that head's keys and values from the
// first tile it needs up to its diagonal, so the items of one K/V head
// share those tiles through the L2 cache, but only while they stay there.
// A unit is one sequence's K/V head (unit = b x kv_heads + K/V head). When
// all units' keys and values fit in three quarters of the L2 (the rest is
// for the queries and outputs streaming past) they form one group, and the
// order above runs across all of them. Otherwise the units form as few
// groups as fit, all of one size but the last, and each group's items,
// heaviest first, come before the next group's: at (1, 32, 8, 16384, 128)
// the 8 K/V heads hold 64 MB against an H200's 50 MB of L2, and the items
// run as two groups of 4 K/V heads. Inside a group and query block, items
// go sequence by sequence, query heads in order.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ITEM_ORDER_H_
#define TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ITEM_ORDER_H_

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSERA_HOST_DEVICE inline
#endif

namespace tessera {
namespace cuda {

struct AttentionItemOrder {
  int kv_heads = 0, group_size = 0;  // query heads per K/V head
  int units = 0, units_per_group = 0, q_blocks = 0;
  TESSERA_HOST_DEVICE int items() const { return units * group_size * q_blocks; }
};

struct AttentionItem {
  int h, b, q_block;
};

// Units per group for `units` units of `seq` tokens at `head_dim`, given
// the device's L2 bytes (0: one group).
inline int AttentionUnitsPerGroup(int64_t units, int64_t seq, int head_dim, size_t l2_bytes) {
  const int64_t unit_bytes = seq * head_dim * 2 * 2;  // K and V, bf16
  const int64_t budget = static_cast<int64_t>(l2_bytes) / 4 * 3;
  if (units <= 0 || budget <= 0 || units * unit_bytes <= budget) return static_cast<int>(units);
  const int64_t groups = (units * unit_bytes + budget - 1) / budget;
  return static_cast<int>((units + groups - 1) / groups);
}

inline AttentionItemOrder MakeAttentionItemOrder(int64_t batch, int heads, int kv_heads,
                                                 int64_t seq, int head_dim, int q_block_rows,
                                                 size_t l2_bytes) {
  AttentionItemOrder o;
  o.kv_heads = kv_heads;
  o.group_size = heads / kv_heads;
  o.units = static_cast<int>(batch * kv_heads);
  o.units_per_group = AttentionUnitsPerGroup(o.units, seq, head_dim, l2_bytes);
  o.q_blocks = static_cast<int>((seq + q_block_rows - 1) / q_block_rows);
  return o;
}

// Item `index` (0 <= index < o.items()) in the order above.
TESSERA_HOST_DEVICE AttentionItem AttentionItemOf(int index, const AttentionItemOrder& o) {
  const int full_group_items = o.units_per_group * o.group_size * o.q_blocks;
  const int group = index / full_group_items, rest = index - group * full_group_items;
  const int first_unit = group * o.units_per_group;
  const int group_units =
      o.units - first_unit < o.units_per_group ? o.units - first_unit : o.units_per_group;
  const int per_query_block = group_units * o.group_size;
  const int within = rest % per_query_block;
  const int unit = first_unit + within / o.group_size;
  return {(unit % o.kv_heads) * o.group_size + within % o.group_size, unit / o.kv_heads,
          o.q_blocks - 1 - rest / per_query_block};
}

}  // namespace cuda
}  // namespace tessera

#undef TESSERA_HOST_DEVICE

#endif  // TESSERA_WORKER_ENGINE_CUDA_ATTENTION_ITEM_ORDER_H_

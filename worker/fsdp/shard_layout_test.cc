// ShardLayout covers every row exactly once, for every small size and world.
#include "worker/fsdp/shard_layout.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ShardLayout, PartitionsEveryRowExactlyOnce) {
  for (int64_t rows = 0; rows <= 9; ++rows) {
    for (int world = 1; world <= 5; ++world) {
      std::vector<int> owner(rows, -1);
      int64_t total = 0;
      for (int rank = 0; rank < world; ++rank) {
        ShardLayout l{rows, 3, world, rank};
        EXPECT_LE(l.local_rows(), l.rows_per_rank());
        EXPECT_GE(l.local_rows(), 0);
        EXPECT_EQ(l.padded_numel(), l.rows_per_rank() * 3);
        EXPECT_GE(l.gathered_numel(), rows * 3);
        for (int64_t r = l.begin_row(); r < l.end_row(); ++r) {
          EXPECT_EQ(owner[r], -1) << "row " << r << " owned twice";
          owner[r] = rank;
          // Rows sit at their natural position in the gathered buffer.
          EXPECT_EQ(rank * l.rows_per_rank() + (r - l.begin_row()), r);
        }
        total += l.shard_numel();
      }
      EXPECT_EQ(total, rows * 3);
      for (int64_t r = 0; r < rows; ++r) EXPECT_NE(owner[r], -1);
    }
  }
}

TEST(ShardLayout, EmptyShardsWhenRowsFewerThanRanks) {
  ShardLayout l{2, 4, 5, 4};
  EXPECT_EQ(l.rows_per_rank(), 1);
  EXPECT_EQ(l.shard_numel(), 0);
  EXPECT_EQ(l.padded_numel(), 4);
}

}  // namespace
}  // namespace tessera

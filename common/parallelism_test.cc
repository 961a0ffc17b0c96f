// ShardGroupSize / ReplicaCount / CheckpointRanks for plain FSDP, hybrid
// sharding and pure data parallelism.
#include "common/parallelism.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec Spec(int world, int group) {
  v1::JobSpec spec;
  spec.set_world_size(world);
  if (group >= 0) spec.mutable_parallelism()->set_shard_group_size(group);
  return spec;
}

TEST(Parallelism, PlainFsdpIsOneGroupOfEveryRank) {
  for (int group : {-1, 0, 8, 9}) {  // unset, 0, world_size, larger
    EXPECT_EQ(ShardGroupSize(Spec(8, group)), 8) << group;
    EXPECT_EQ(ReplicaCount(Spec(8, group)), 1) << group;
    EXPECT_EQ(CheckpointRanks(Spec(8, group)), 8) << group;
  }
}

TEST(Parallelism, HybridShardingAndDataParallelism) {
  EXPECT_EQ(ShardGroupSize(Spec(8, 4)), 4);
  EXPECT_EQ(ReplicaCount(Spec(8, 4)), 2);
  EXPECT_EQ(CheckpointRanks(Spec(8, 4)), 4);
  EXPECT_EQ(ShardGroupSize(Spec(4, 1)), 1);
  EXPECT_EQ(ReplicaCount(Spec(4, 1)), 4);
  EXPECT_EQ(ShardGroupSize(Spec(0, 0)), 1);  // an unvalidated spec still gives a group
}

}  // namespace
}  // namespace tessera

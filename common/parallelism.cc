// Group sizes from JobSpec.parallelism (see parallelism.h).
#include "common/parallelism.h"

#include <algorithm>

namespace tessera {

int ShardGroupSize(const v1::JobSpec& spec) {
  const int world = std::max(1, spec.world_size());
  const int group = spec.parallelism().shard_group_size();
  return group >= 1 && group < world ? group : world;
}

int ReplicaCount(const v1::JobSpec& spec) {
  const int world = std::max(1, spec.world_size());
  return std::max(1, world / ShardGroupSize(spec));
}

}  // namespace tessera

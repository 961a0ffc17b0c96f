// How a job's ranks share the model (JobSpec.parallelism): the one place
// that turns the spec's shard_group_size into the group sizes the trainer,
// the checkpoint commit and the tools use, so they cannot disagree.
//
// Ranks form world_size / shard_group_size groups of consecutive ranks.
// Rank r is rank r % group of shard group r / group, and replica r / group
// of the replica group of shard rank r % group.
#ifndef TESSERA_COMMON_PARALLELISM_H_
#define TESSERA_COMMON_PARALLELISM_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Ranks per shard group: shard_group_size when it is in [1, world_size),
// else world_size (plain FSDP). Validation that it divides world_size is
// the spec checks' job; this never returns 0.
int ShardGroupSize(const v1::JobSpec& spec);

// How many shard groups (replicas of each shard) the job has.
int ReplicaCount(const v1::JobSpec& spec);

// The ranks whose files a checkpoint of this job holds: only the first
// shard group writes, the other replicas hold the same shards.
inline int CheckpointRanks(const v1::JobSpec& spec) { return ShardGroupSize(spec); }

}  // namespace tessera

#endif  // TESSERA_COMMON_PARALLELISM_H_

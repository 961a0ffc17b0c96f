// The size of one checkpoint of a job, from its JobSpec alone: every
// writing rank's state file (the layout in worker/trainer/fsdp_checkpoint.cc)
// plus the manifests. The coordinator shows it at submit and in the job's
// status, and checks the checkpoint directory's free space against it before
// each checkpoint (server/checkpoint_space.h); the trainer's test holds it
// to the bytes a checkpoint really writes.
#ifndef TESSERA_COMMON_CHECKPOINT_SIZE_H_
#define TESSERA_COMMON_CHECKPOINT_SIZE_H_

#include <cstdint>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

struct CheckpointSize {
  int64_t state_bytes = 0;  // every writing rank's state file
  int64_t total_bytes = 0;  // with the manifests
  int writing_ranks = 0;    // the first shard group (common/parallelism.h)
  int64_t parameters = 0;
};

// For a spec that passed validation.
CheckpointSize EstimateCheckpointSize(const v1::JobSpec& spec);

}  // namespace tessera

#endif  // TESSERA_COMMON_CHECKPOINT_SIZE_H_

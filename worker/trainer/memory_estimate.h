// What a job will allocate on one rank, computed from the JobSpec alone, so a
// job too large for its device is refused before anything is allocated
// (FsdpTrainer::Setup compares it with the engine's free memory and answers
// RESOURCE_EXHAUSTED with the breakdown).
//
// The tensors FsdpTrainer allocates are counted exactly: the parameter
// shards (fp32 master, Adam m and v, fp32 gradient, compute copy), the
// gathered weights and full-size gradients (none at world size 1, where they
// are views of the shards), the activations saved for backward, the
// scratch, and the FP8 metadata. fsdp_trainer_test holds the estimate to
// the bytes the trainer really allocates. The engine's own workspace (one
// chunk of the fused loss's logits, cuBLASLt and attention scratch) is an
// upper bound added on top.
#ifndef TESSERA_WORKER_TRAINER_MEMORY_ESTIMATE_H_
#define TESSERA_WORKER_TRAINER_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

struct MemoryEstimate {
  int64_t parameter_shards = 0;  // master, m, v, gradient and compute shards
  int64_t gathered = 0;          // gathered weights and full-size gradients
  int64_t activations = 0;       // saved for backward, all layers
  int64_t scratch = 0;           // per-step buffers and FP8 metadata
  int64_t engine_workspace = 0;  // upper bound of the engine's own buffers

  // What FsdpTrainer allocates through the ops interface.
  int64_t trainer_bytes() const { return parameter_shards + gathered + activations + scratch; }
  int64_t total() const { return trainer_bytes() + engine_workspace; }
  // "12.3 GiB (parameter shards 2.1 GiB, gathered ..., ...)".
  std::string ToString() const;
};

// "12.34 GiB".
std::string FormatGiB(int64_t bytes);

// For a spec that passed validation (and the coordinator's defaults).
MemoryEstimate EstimateMemory(const v1::JobSpec& spec, int rank, int world);

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_MEMORY_ESTIMATE_H_

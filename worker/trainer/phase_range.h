// Names the phases of a training step for profilers: an NVTX range (Nsight
// Systems shows all-gather, forward, loss, backward, reduce-scatter,
// optimizer as named spans on the GPU timeline). NVTX v3 is header-only and
// costs a branch when no profiler is attached, so CPU workers pay nothing.
#ifndef TESSERA_WORKER_TRAINER_PHASE_RANGE_H_
#define TESSERA_WORKER_TRAINER_PHASE_RANGE_H_

#include "nvtx3/nvToolsExt.h"

namespace tessera {

class PhaseRange {
 public:
  explicit PhaseRange(const char* name) { nvtxRangePushA(name); }
  ~PhaseRange() { nvtxRangePop(); }
  PhaseRange(const PhaseRange&) = delete;
  PhaseRange& operator=(const PhaseRange&) = delete;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_PHASE_RANGE_H_

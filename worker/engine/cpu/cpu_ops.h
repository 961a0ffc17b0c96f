// The CPU reference engine: the Ops interface (worker/ops/ops.h) over the
// free functions in this directory, host memory, and OpenBLAS. Runs
// synchronously (streams are ignored). OpenBLAS is limited to one thread per
// engine so that several CPU workers on one host do not oversubscribe it.
#ifndef TESSERA_WORKER_ENGINE_CPU_CPU_OPS_H_
#define TESSERA_WORKER_ENGINE_CPU_CPU_OPS_H_

#include <memory>

#include "worker/ops/ops.h"

namespace tessera {

std::unique_ptr<Ops> CreateCpuOps();

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_CPU_OPS_H_

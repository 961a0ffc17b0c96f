// Collectives on GPUs through NCCL, bootstrapped through the coordinator's
// rendezvous: rank 0 creates the ncclUniqueId and publishes it in the store,
// the others read it. The communicator is non-blocking, so initialisation
// and every collective are bounded by the timeout: a collective that does
// not finish in time is torn down with ncclCommAbort and reported as
// ABORTED, never a hang.
//
// Collectives run on the communicator's own stream, ordered after the
// caller's stream with an event; the call then waits (polling, with the
// timeout) for completion. Waiting on the host costs overlap; it is what
// makes the watchdog possible without a second thread, and the overlap of
// the next block's all-gather with compute is left to the performance work.
#ifndef TESSERA_WORKER_ENGINE_CUDA_NCCL_COMMUNICATOR_H_
#define TESSERA_WORKER_ENGINE_CUDA_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     int device_index,
                                                                     absl::Duration timeout);

}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_NCCL_COMMUNICATOR_H_

// Collectives on GPUs through NCCL, bootstrapped through the coordinator's
// rendezvous: rank 0 creates the ncclUniqueId and publishes it in the store,
// the others read it. The communicator is non-blocking, so initialisation
// and every collective are bounded by the timeout: a collective that does
// not finish in time is torn down with ncclCommAbort and reported as
// ABORTED, never a hang.
//
// Collectives run on the communicator's own stream (created at init),
// ordered after the caller's stream with one event; the caller's stream is
// ordered after the collective with another. Today the call also waits on
// the host (polling ncclCommGetAsyncError and the completion event, bounded
// by the timeout): that is the watchdog, and it costs the overlap the two
// events would otherwise allow. Moving the polling to a watchdog thread so
// the call returns right after issuing is the planned next step; the
// stream/event structure already fits it.
//
// Abort() may be called from any thread: the group is torn down under a
// mutex and operations in flight return ABORTED at their next poll.
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

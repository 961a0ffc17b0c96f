// Collectives on GPUs through NCCL, bootstrapped through the coordinator's
// rendezvous: rank 0 creates the ncclUniqueId and publishes it in the store,
// the others read it. The communicator is non-blocking, so initialisation
// and every collective are bounded by the timeout: a collective that does
// not finish in time is torn down with ncclCommAbort and reported as
// ABORTED, never a hang.
//
// Collectives are queued, not waited for. Each runs on the communicator's
// own stream, ordered after the caller's stream by one event and followed by
// a completion event (from a ring created at init) that the caller's stream
// waits on. The call returns as soon as NCCL has accepted the operation, so
// the host can queue a whole step ahead of the GPU and never drains it.
//
// A watchdog thread (started at init, device set once) owns the timeouts. It
// polls the oldest unfinished collective's completion event and
// ncclCommGetAsyncError. A collective that fails, or has not finished
// `timeout` after it was issued and everything queued before it on the
// communicator's stream had finished, tears the group down with
// ncclCommAbort. That also ends the NCCL kernels still on the device, so a
// caller blocked in a stream synchronise returns; FirstFailure() and every
// later call then report ABORTED, naming the collective and the rank.
//
// Abort() may be called from any thread: the group is torn down under the
// mutex and everything after it returns ABORTED.
//
// Determinism: ring and tree reductions add the ranks' values in an order
// fixed by the world size, the topology, the message size and NCCL's
// version, and NCCL picks its algorithm from a model, not from timings, so
// a reduce-scatter or all-reduce gives the same bits every run. NVLink
// SHARP (NVLS) reductions, done inside the NVSwitch, do not promise that,
// so the first communicator of a process sets NCCL_NVLS_ENABLE=0 unless the
// worker's environment already sets it (an operator may turn NVLS on, at the
// cost of bit-reproducible multi-GPU jobs).
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

// Collectives on CPU through Gloo's TCP transport. The group is bootstrapped
// through a RendezvousStore (the coordinator's Rendezvous service in
// production, via GlooStore), so no FileStore or separate rendezvous server
// is needed.
//
// Every collective carries the timeout given at creation: a dead or stuck
// peer becomes ABORTED, never a hang. Gloo signals failures with exceptions;
// they are caught here and never cross this boundary. Abort() makes later
// calls fail at once; a call already blocked ends at its timeout. A group of
// one rank needs no peers and no store: its collectives are copies.
// Collectives are issued by one thread at a time; Abort() may come from any
// thread. bf16 reduce-scatter sums in fp32 and rounds once (see the .cc).
//
// Errors: INVALID_ARGUMENT for bad rank/world/timeout/store or mismatched
// buffers; ABORTED when joining fails (a peer never arrives within the
// timeout) or a collective fails or times out.
#ifndef TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(RendezvousStore* store,
                                                                     int rank, int world_size,
                                                                     const std::string& host,
                                                                     absl::Duration timeout);

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_

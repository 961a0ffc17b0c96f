// How the engine-neutral layers build a collective group without knowing the
// engine: the worker passes a factory that makes a Gloo communicator (CPU) or
// an NCCL one (CUDA). It bootstraps through `store` (whose keys it may
// assume are private to this group), as `rank` of `world_size`, reachable at
// `host`, and gives up with ABORTED after `timeout`.
#ifndef TESSERA_WORKER_COMM_COMMUNICATOR_FACTORY_H_
#define TESSERA_WORKER_COMM_COMMUNICATOR_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

using CommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    RendezvousStore* store, int rank, int world_size, const std::string& host,
    absl::Duration timeout)>;

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_COMMUNICATOR_FACTORY_H_

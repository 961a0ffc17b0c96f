// What a worker daemon does with its job when it is asked to stop (SIGTERM
// from systemd, or a Kubernetes eviction) before it exits: it asks the
// coordinator to suspend the job (a checkpoint at the next step boundary,
// then every rank is released with an Abort), and waits up to a grace
// period for that Abort, so the job can be resumed later from the
// checkpoint instead of failing. When the job cannot be suspended (no
// checkpoint.dir, not RUNNING, the coordinator unreachable) or the grace
// period runs out, the caller aborts the job at once as it always did: the
// job then fails, or restarts if JobSpec.max_restarts allows.
#ifndef TESSERA_WORKER_DAEMON_GRACEFUL_STOP_H_
#define TESSERA_WORKER_DAEMON_GRACEFUL_STOP_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/worker.pb.h"
#include "worker/daemon/worker_core.h"

namespace tessera {

// systemd waits 90 s and Kubernetes 30 s by default before SIGKILL; this
// leaves a few seconds of either for the exit itself.
inline constexpr int kDefaultSuspendGraceSeconds = 25;

struct GracefulStop {
  enum class Outcome {
    kIdle,          // no job here
    kSuspended,     // the job was suspended and this worker released
    kNotSuspended,  // the coordinator will not (or could not be asked to)
    kGraceExpired,  // asked, but no Abort came within the grace period
  };
  Outcome outcome = Outcome::kIdle;
  std::string message;  // one line for the worker's log
};

// `announce_stopping` tells the coordinator this worker is stopping and
// returns its answer (Registration::AnnounceStopping). A grace period of
// zero asks nothing: the job is left to the caller's Abort at once.
GracefulStop SuspendBeforeStopping(
    WorkerCore& core,
    const std::function<absl::StatusOr<v1::HeartbeatResponse>()>& announce_stopping,
    absl::Duration grace);

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_GRACEFUL_STOP_H_

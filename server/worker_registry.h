// The coordinator's registry of worker daemons: who they are, where they
// listen, whether they are alive and healthy, and which job holds them.
// A worker not heard from within the liveness timeout leaves the registry;
// Sweep() reports it so the coordinator can fail that worker's job.
//
// Each record also keeps the worker's own report of what it runs
// (WorkerActivity). A worker is free only when the coordinator assigned it
// nothing and it reports nothing (worker_reconciliation.h): a worker still
// holding a job the coordinator no longer runs on it is told to abort that
// job, and waits until it reports itself idle.
// Thread-compatible: the Coordinator serialises access under its mutex.
#ifndef TESSERA_SERVER_WORKER_REGISTRY_H_
#define TESSERA_SERVER_WORKER_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/tessera/v1/coordinator.pb.h"
#include "proto/tessera/v1/worker.pb.h"

namespace tessera {

class WorkerRegistry {
 public:
  explicit WorkerRegistry(absl::Duration liveness_timeout) : timeout_(liveness_timeout) {}

  // Registers a worker; a worker re-registering from the same address
  // replaces its old record (which is reported by the next Sweep as lost if
  // it held a job). Returns the new worker id.
  std::string Register(const std::string& address, const v1::DeviceInfo& device, absl::Time now,
                       const v1::WorkerActivity& activity = {});
  // NOT_FOUND if the worker is unknown (e.g. swept), or if `address` is set
  // and differs from the registered one (an id handed out again after a
  // coordinator restart), telling it to register again.
  absl::Status Heartbeat(const std::string& worker_id, bool healthy, const std::string& reason,
                         absl::Time now, const v1::WorkerActivity& activity = {},
                         const std::string& address = "");
  // The job the worker reports but must abort (reconciliation), or empty.
  std::string OrphanJob(const std::string& worker_id) const;
  // Forgets a worker that could not be reached (its connection was refused):
  // it cannot be placed again until it registers anew, which a live worker
  // does at its next heartbeat (answered NOT_FOUND).
  void MarkLost(const std::string& worker_id);

  struct Lost {
    std::string worker_id;
    std::string job_id;  // empty if it was free
    std::string reason;
  };
  // Removes workers silent for longer than the timeout.
  std::vector<Lost> Sweep(absl::Time now);

  // Free, healthy workers of `kind`, oldest registration first.
  std::vector<std::string> FreeWorkers(v1::DeviceKind kind) const;
  int CountWorkers(v1::DeviceKind kind) const;
  // Registered workers of `kind` that are healthy, whether free or busy.
  int CountHealthyWorkers(v1::DeviceKind kind) const;
  void Assign(const std::string& worker_id, const std::string& job_id);
  // Ends the worker's assignment to `job_id`. `confirmed_idle`: the worker
  // acknowledged the job's Abort, so it holds nothing; otherwise it may
  // still hold the job, and it counts as holding it until it reports
  // otherwise.
  void Release(const std::string& worker_id, const std::string& job_id, bool confirmed_idle);
  const v1::WorkerRecord* Find(const std::string& worker_id) const;
  std::vector<v1::WorkerRecord> List() const;
  // Workers lost so far (swept for silence, or marked lost), since start.
  int64_t losses() const { return losses_; }

 private:
  absl::Duration timeout_;
  int next_id_ = 1;
  int64_t losses_ = 0;
  std::map<int, v1::WorkerRecord> by_order_;       // registration order -> record
  std::map<std::string, int> order_by_id_;
  std::map<std::string, absl::Time> last_seen_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_WORKER_REGISTRY_H_

// RendezvousStore over the coordinator's Rendezvous RPCs, scoped to one job.
// Gloo's store and the NCCL unique-id exchange go through this, so workers
// need no rendezvous service of their own.
#ifndef TESSERA_WORKER_DAEMON_RENDEZVOUS_CLIENT_H_
#define TESSERA_WORKER_DAEMON_RENDEZVOUS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "common/grpc_security.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

class RendezvousClient : public RendezvousStore {
 public:
  // `credentials` (null: plaintext, no token) carry the worker credential
  // and the worker's session, which the coordinator checks against the job.
  RendezvousClient(const std::string& coordinator_address, std::string job_id,
                   std::shared_ptr<const ClientCredentials> credentials = nullptr);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t increment) override;

 private:
  std::string job_id_;
  std::shared_ptr<const ClientCredentials> credentials_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_RENDEZVOUS_CLIENT_H_

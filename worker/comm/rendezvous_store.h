// The key-value store the ranks of one job bootstrap their collective group
// through. The worker daemon implements it over the coordinator's Rendezvous
// RPCs (worker/daemon/rendezvous_client.*); tests implement it in memory.
// Keys are scoped to one job by the implementation.
#ifndef TESSERA_WORKER_COMM_RENDEZVOUS_STORE_H_
#define TESSERA_WORKER_COMM_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until every key exists; DEADLINE_EXCEEDED after `timeout`.
  virtual absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                                       absl::Duration timeout) = 0;
  // Atomically adds `increment` to the integer at key (0 if absent).
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t increment) = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_RENDEZVOUS_STORE_H_

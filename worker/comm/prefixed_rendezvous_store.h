// A view of a RendezvousStore with every key under a prefix, so that several
// collective groups of one job (hybrid sharding's shard and replica groups)
// bootstrap through the job's one store without their keys meeting.
#ifndef TESSERA_WORKER_COMM_PREFIXED_RENDEZVOUS_STORE_H_
#define TESSERA_WORKER_COMM_PREFIXED_RENDEZVOUS_STORE_H_

#include <string>
#include <vector>

#include "worker/comm/rendezvous_store.h"

namespace tessera {

class PrefixedRendezvousStore : public RendezvousStore {
 public:
  // `base` must outlive this view.
  PrefixedRendezvousStore(RendezvousStore* base, std::string prefix)
      : base_(base), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t increment) override;

 private:
  RendezvousStore* base_;
  std::string prefix_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_PREFIXED_RENDEZVOUS_STORE_H_

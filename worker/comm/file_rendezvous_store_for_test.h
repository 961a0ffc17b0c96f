// Test-only RendezvousStore shared by separate processes through a
// directory: each key is a file written atomically (temp + rename); Get
// polls. Lets multi-process tests build real Gloo (or NCCL) groups without
// a coordinator.
#ifndef TESSERA_WORKER_COMM_FILE_RENDEZVOUS_STORE_FOR_TEST_H_
#define TESSERA_WORKER_COMM_FILE_RENDEZVOUS_STORE_FOR_TEST_H_

#include <string>
#include <vector>

#include "worker/comm/rendezvous_store.h"

namespace tessera {

class FileRendezvousStore : public RendezvousStore {
 public:
  explicit FileRendezvousStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t increment) override;

 private:
  std::string Path(const std::string& key) const;
  std::string dir_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_FILE_RENDEZVOUS_STORE_FOR_TEST_H_

// The coordinator side of rendezvous: a small key-value store per job that
// the ranks use to bootstrap their collective group (Gloo's store on CPU,
// the NCCL unique id on GPU). Get blocks until every key exists or the
// timeout passes. A job's keys are dropped when the job ends. Ids, keys,
// values and key lists are bounded (request_limits.h): INVALID_ARGUMENT
// naming the field beyond its bound. Thread-safe.
#ifndef TESSERA_SERVER_RENDEZVOUS_TABLE_H_
#define TESSERA_SERVER_RENDEZVOUS_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

class RendezvousTable {
 public:
  absl::Status Set(const std::string& job_id, const std::string& key, const std::string& value);
  // DEADLINE_EXCEEDED names the missing keys.
  absl::StatusOr<std::vector<std::string>> Get(const std::string& job_id,
                                               const std::vector<std::string>& keys,
                                               absl::Duration timeout);
  // Adds to the integer stored at key (0 if absent); returns the new value.
  absl::StatusOr<int64_t> Add(const std::string& job_id, const std::string& key, int64_t increment);
  void DropJob(const std::string& job_id);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RENDEZVOUS_TABLE_H_

// A test-only, in-memory Rendezvous service: what the coordinator serves,
// reduced to a map per job. The daemon's tests point RendezvousClient and
// WorkerService::InitCollective at it. It records the timeout each Get asked
// for, so tests can check how the client maps its timeout.
#ifndef TESSERA_WORKER_DAEMON_FAKE_RENDEZVOUS_SERVICE_H_
#define TESSERA_WORKER_DAEMON_FAKE_RENDEZVOUS_SERVICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "proto/tessera/v1/worker.grpc.pb.h"

namespace tessera {

class FakeRendezvousService final : public v1::Rendezvous::Service {
 public:
  grpc::Status RendezvousSet(grpc::ServerContext*, const v1::RendezvousSetRequest* req,
                             v1::RendezvousSetResponse*) override;
  grpc::Status RendezvousGet(grpc::ServerContext* context, const v1::RendezvousGetRequest* req,
                             v1::RendezvousGetResponse* resp) override;
  grpc::Status RendezvousAdd(grpc::ServerContext*, const v1::RendezvousAddRequest* req,
                             v1::RendezvousAddResponse* resp) override;

  // Copies the value stored under (job_id, key) into *value; false if none.
  bool Lookup(const std::string& job_id, const std::string& key, std::string* value);
  int32_t last_get_timeout_ms();

 private:
  using Key = std::pair<std::string, std::string>;  // (job_id, key)
  absl::Mutex mu_;
  std::map<Key, std::string> values_ ABSL_GUARDED_BY(mu_);
  int32_t last_get_timeout_ms_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_FAKE_RENDEZVOUS_SERVICE_H_

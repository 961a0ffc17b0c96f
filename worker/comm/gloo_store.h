// Gloo's bootstrap store (gloo::rendezvous::Store) on top of Tessera's
// RendezvousStore, so that the coordinator brokers the exchange of TCP
// addresses when a Gloo group forms: no FileStore, HashStore or Redis in
// production.
//
// Gloo's store interface reports failure by throwing; this adapter throws
// gloo::IoException (a missing key after the timeout, a store error) and
// CreateGlooCommunicator converts it to an absl::Status. Keys are stored
// under `prefix` so that Gloo's names ("rank_0", ...) cannot collide with
// other users of the same job-scoped store.
#ifndef TESSERA_WORKER_COMM_GLOO_STORE_H_
#define TESSERA_WORKER_COMM_GLOO_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "worker/comm/rendezvous_store.h"

namespace tessera {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `store` is not owned and must outlive this object. `timeout` bounds
  // get() and the wait() overload that carries no timeout of its own.
  GlooStore(RendezvousStore* store, absl::Duration timeout, std::string prefix = "gloo/");

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const;
  // Fetches every key or throws gloo::IoException naming the failure.
  std::vector<std::string> GetOrThrow(const std::vector<std::string>& keys,
                                      absl::Duration timeout);

  RendezvousStore* store_;
  absl::Duration timeout_;
  std::string prefix_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_GLOO_STORE_H_

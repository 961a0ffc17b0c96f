// The coordinator's gate in front of every RPC: the role check of
// common/access_policy.h (client API for user tokens, worker API for the
// worker credential) and, for the worker API, the worker sessions of
// worker_sessions.h (heartbeats speak only for their own worker; rendezvous
// keys are used only by the job's ranks). The service methods call one
// static helper each; a null guard (tests, and loopback setups without
// tokens) allows every call.
#ifndef TESSERA_SERVER_CALL_GUARD_H_
#define TESSERA_SERVER_CALL_GUARD_H_

#include <memory>
#include <string>

#include "common/access_policy.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/coordinator.h"
#include "server/worker_sessions.h"

namespace tessera {

class CallGuard {
 public:
  CallGuard(std::shared_ptr<const AccessPolicy> access, Coordinator* core)
      : access_(std::move(access)), core_(core) {}

  // Client API (Coordinator service).
  static grpc::Status User(CallGuard* guard, grpc::ServerContextBase* context);
  // The same, and who the caller is (Principal::Unchecked() without a guard
  // or tokens).
  static grpc::Status User(CallGuard* guard, grpc::ServerContextBase* context, Principal* who);
  // RegisterWorker; on success `Registered` issues the worker's session.
  static grpc::Status Worker(CallGuard* guard, grpc::ServerContextBase* context);
  static std::string Registered(CallGuard* guard, const std::string& worker_id);
  static grpc::Status Heartbeat(CallGuard* guard, grpc::ServerContextBase* context,
                                const std::string& worker_id);
  static grpc::Status Rank(CallGuard* guard, grpc::ServerContextBase* context,
                           const std::string& job_id);

 private:
  bool sessions_enforced() const { return access_ != nullptr && access_->enforced(); }

  std::shared_ptr<const AccessPolicy> access_;
  Coordinator* core_;
  WorkerSessions sessions_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CALL_GUARD_H_

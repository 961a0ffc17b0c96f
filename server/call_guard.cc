// Role and session checks for the coordinator's RPCs (see call_guard.h).
#include "server/call_guard.h"

#include "common/grpc_security.h"
#include "common/grpc_status.h"

namespace tessera {

grpc::Status CallGuard::User(CallGuard* guard, grpc::ServerContextBase* context) {
  if (guard == nullptr) return grpc::Status::OK;
  return Authorize(guard->access_.get(), context, Role::kUser);
}

grpc::Status CallGuard::User(CallGuard* guard, grpc::ServerContextBase* context,
                             Principal* who) {
  if (guard == nullptr) {
    *who = Principal::Unchecked();
    return grpc::Status::OK;
  }
  return AuthenticateUser(guard->access_.get(), context, who);
}

grpc::Status CallGuard::Worker(CallGuard* guard, grpc::ServerContextBase* context) {
  if (guard == nullptr) return grpc::Status::OK;
  return Authorize(guard->access_.get(), context, Role::kWorker);
}

std::string CallGuard::Registered(CallGuard* guard, const std::string& worker_id) {
  if (guard == nullptr || !guard->sessions_enforced()) return "";
  return guard->sessions_.Issue(worker_id);
}

grpc::Status CallGuard::Heartbeat(CallGuard* guard, grpc::ServerContextBase* context,
                                  const std::string& worker_id) {
  if (grpc::Status s = Worker(guard, context); !s.ok()) return s;
  if (guard == nullptr || !guard->sessions_enforced()) return grpc::Status::OK;
  return ToGrpcStatus(
      guard->sessions_.CheckHeartbeat(ClientMetadata(context, kWorkerSessionHeader), worker_id));
}

grpc::Status CallGuard::Rank(CallGuard* guard, grpc::ServerContextBase* context,
                             const std::string& job_id) {
  if (grpc::Status s = Worker(guard, context); !s.ok()) return s;
  if (guard == nullptr || !guard->sessions_enforced()) return grpc::Status::OK;
  Coordinator* core = guard->core_;
  return ToGrpcStatus(guard->sessions_.CheckRank(
      ClientMetadata(context, kWorkerSessionHeader), job_id, [core](const std::string& worker) {
        for (const v1::WorkerRecord& w : core->ListWorkers()) {
          if (w.worker_id() == worker) return w.job_id();
        }
        return std::string();
      }));
}

}  // namespace tessera

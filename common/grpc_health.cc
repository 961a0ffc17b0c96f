// Health service and reflection switches (see grpc_health.h).
#include "common/grpc_health.h"

#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace tessera {

void EnableHealthAndReflection() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

void SetServing(grpc::Server* server, const std::vector<std::string>& services, bool serving) {
  if (server == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  for (const std::string& name : services) health->SetServingStatus(name, serving);
  health->SetServingStatus("", serving);
}

}  // namespace tessera

// The standard gRPC health service (grpc.health.v1.Health) and server
// reflection on every Tessera server, so load balancers, Kubernetes probes
// and grpcurl-style tools work without Tessera-specific clients. The
// overall status ("") and each named service read SERVING once the server
// has loaded its state, and NOT_SERVING while it drains on SIGTERM or, on a
// worker, after a sticky device error.
#ifndef TESSERA_COMMON_GRPC_HEALTH_H_
#define TESSERA_COMMON_GRPC_HEALTH_H_

#include <string>
#include <vector>

#include "grpcpp/server.h"

namespace tessera {

// Call once before the first grpc::ServerBuilder is made.
void EnableHealthAndReflection();

// Sets the overall status and that of each of `services` (full names, e.g.
// "tessera.v1.Coordinator").
void SetServing(grpc::Server* server, const std::vector<std::string>& services, bool serving);

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_HEALTH_H_

// Starts an in-process gRPC server on a free loopback port for the daemon's
// tests, which talk to fake coordinator services and to the real
// WorkerService over real sockets instead of mocking gRPC.
#ifndef TESSERA_WORKER_DAEMON_LOOPBACK_SERVER_FOR_TEST_H_
#define TESSERA_WORKER_DAEMON_LOOPBACK_SERVER_FOR_TEST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

struct LoopbackServer {
  std::unique_ptr<grpc::Server> server;  // null if it could not listen
  int port = 0;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

// `port` 0 picks a free one; a fixed port restarts a server where one was.
inline LoopbackServer StartLoopbackServer(const std::vector<grpc::Service*>& services,
                                          int port = 0) {
  LoopbackServer out;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                           &out.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  out.server = builder.BuildAndStart();
  if (out.port == 0) out.server.reset();
  return out;
}

}  // namespace tessera

#endif  // TESSERA_WORKER_DAEMON_LOOPBACK_SERVER_FOR_TEST_H_

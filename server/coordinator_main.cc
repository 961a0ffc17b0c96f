// tessera-coordinator: serves the v1 API (Coordinator, WorkerRegistry,
// Rendezvous) and runs the scheduler. Prints "tessera-coordinator listening
// on ADDR" once serving; SIGINT/SIGTERM cancel running jobs (aborting their
// workers) and shut down cleanly.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/grpc_keepalive.h"
#include "common/shutdown_signal.h"
#include "grpcpp/grpcpp.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/worker_client.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "host:port to serve the API on");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port workers use to reach this coordinator's Rendezvous service "
          "(default: --listen, with 0.0.0.0 replaced by this host's name)");
ABSL_FLAG(std::string, state_dir, "/tmp/tessera-coordinator",
          "directory where job records are persisted");
ABSL_FLAG(int, worker_timeout_ms, 5000, "a worker silent this long leaves the registry");
ABSL_FLAG(int, heartbeat_interval_ms, 1000, "heartbeat interval asked of workers");
ABSL_FLAG(int, collective_timeout_ms, 60000,
          "per-collective timeout on workers; also bounds setup commands");
ABSL_FLAG(int, starvation_timeout_s, 300,
          "a queued job the registered workers could run that has waited this long stops "
          "later jobs of its device kind from starting before it (0: strict FIFO among "
          "runnable jobs)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tessera-coordinator --listen=HOST:PORT --state_dir=DIR: the Tessera coordinator");
  absl::ParseCommandLine(argc, argv);

  tessera::BlockShutdownSignals();  // before any thread starts
  tessera::IgnoreBrokenPipeSignals();

  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::string advertise = absl::GetFlag(FLAGS_advertise_address);
  if (advertise.empty()) {
    advertise = listen;
    if (absl::StartsWith(advertise, "0.0.0.0:") || absl::StartsWith(advertise, "[::]:")) {
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      advertise = absl::StrCat(host, advertise.substr(advertise.rfind(':')));
    }
  }

  tessera::CoordinatorOptions options;
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.rendezvous_address = advertise;
  options.worker_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_worker_timeout_ms));
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.collective_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_collective_timeout_ms));
  options.starvation_timeout = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_starvation_timeout_s)));
  const absl::Duration setup_timeout = options.collective_timeout + absl::Seconds(60);
  options.connect = [setup_timeout](const std::string& address) {
    return std::make_unique<tessera::WorkerClient>(address, setup_timeout);
  };

  tessera::Coordinator core(options);
  if (absl::Status s = core.Start(); !s.ok()) {
    std::fprintf(stderr, "tessera-coordinator: %s\n", s.ToString().c_str());
    return 1;
  }
  tessera::CoordinatorService coordinator_service(&core);
  tessera::WorkerRegistryService registry_service(&core);
  tessera::RendezvousService rendezvous_service(&core);

  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(&coordinator_service);
  builder.RegisterService(&registry_service);
  builder.RegisterService(&rendezvous_service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  tessera::ApplyServerKeepalive(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    std::fprintf(stderr, "tessera-coordinator: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  std::printf("tessera-coordinator listening on %s\n", listen.c_str());
  std::fflush(stdout);

  const int sig = tessera::WaitForShutdownSignal();
  std::printf("tessera-coordinator: signal %d, shutting down\n", sig);
  std::fflush(stdout);
  core.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

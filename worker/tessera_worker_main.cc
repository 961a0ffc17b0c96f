// tessera-worker: one worker daemon per device (--device=cpu or cuda:N).
// Serves WorkerService, registers with the coordinator, heartbeats, and runs
// the commands it is handed through the compute engine of its device. Prints
// "tessera-worker <id> serving on ADDR device=DEVICE" once registered.
// SIGINT/SIGTERM abort the current job and shut down cleanly.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_keepalive.h"
#include "common/shutdown_signal.h"
#include "grpcpp/grpcpp.h"
#include "worker/daemon/registration.h"
#include "worker/daemon/worker_core.h"
#include "worker/daemon/worker_service.h"
#include "worker/trainer/trainer_factory.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "the coordinator's host:port");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda:N for GPU N");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port for this worker's WorkerService (port 0 picks a free one)");
ABSL_FLAG(std::string, host, "",
          "host name peers use to reach this worker for collectives (default: the --listen host; "
          "for a wildcard --listen, this host's name, also used in the registered address)");

namespace {

// "host:port" -> "host" (brackets of an IPv6 literal kept).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tessera-worker --coordinator=HOST:PORT --device=cpu|cuda:N: a Tessera worker daemon");
  absl::ParseCommandLine(argc, argv);
  tessera::BlockShutdownSignals();  // before any thread starts
  tessera::IgnoreBrokenPipeSignals();

  const std::string device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<tessera::v1::DeviceInfo> info = tessera::DescribeDevice(device);
  if (!info.ok()) {
    std::fprintf(stderr, "tessera-worker: --device=%s: %s\n", device.c_str(),
                 info.status().ToString().c_str());
    return 1;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string listen_host = HostOf(listen);
  // Peers and the coordinator need a name they can dial: a wildcard listen
  // address falls back to --host, then to the machine's host name.
  std::string host = absl::GetFlag(FLAGS_host);
  if (host.empty()) host = IsWildcard(listen_host) ? info->host() : listen_host;

  tessera::WorkerCore core([device] { return tessera::CreateTrainer(device); });
  tessera::WorkerServiceImpl service(&core, host);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  tessera::ApplyServerKeepalive(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "tessera-worker: --listen=%s: cannot listen there\n", listen.c_str());
    return 1;
  }
  const std::string address =
      absl::StrCat(IsWildcard(listen_host) ? host : listen_host, ":", port);

  tessera::v1::RegisterWorkerRequest request;
  request.set_address(address);
  *request.mutable_device() = *info;
  bool announced = false;  // touched on the registration thread only
  tessera::Registration registration(
      absl::GetFlag(FLAGS_coordinator), request,
      [&core] { return tessera::Registration::Health{core.healthy(), core.health_reason()}; },
      [&](const std::string& id) {
        if (!announced) {
          std::printf("tessera-worker %s serving on %s device=%s\n", id.c_str(), address.c_str(),
                      device.c_str());
          announced = true;
        } else {
          std::printf("tessera-worker registered again as %s\n", id.c_str());
        }
        std::fflush(stdout);
      });
  registration.Start();

  const int sig = tessera::WaitForShutdownSignal();
  std::printf("tessera-worker: signal %d, shutting down\n", sig);
  std::fflush(stdout);
  core.Abort("", "worker shutting down").IgnoreError();
  registration.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return 0;
}

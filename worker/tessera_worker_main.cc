// tessera-worker: one worker daemon per device (--device=cpu or cuda:N).
// Serves WorkerService, registers with the coordinator, heartbeats, and runs
// the commands it is handed through the compute engine of its device. Prints
// "tessera-worker <id> serving on ADDR device=DEVICE" once registered.
// SIGTERM first asks the coordinator to suspend the job running here (a
// checkpoint at the next step boundary) and waits up to --suspend_grace_s
// for it to release this worker (worker/daemon/graceful_stop.h); then, as
// on SIGINT, any job still here is aborted and the daemon shuts down
// cleanly. With TLS and
// the worker credential (README.md, operator section) only the coordinator
// and peers may command it, and --data_root bounds where it writes.
// grpc.health.v1.Health reads NOT_SERVING after a sticky device error and
// while shutting down; server reflection is on. --failpoints (or
// TESSERA_FAILPOINTS) arms fault injection for recovery tests
// (worker/daemon/failpoints.h); a malformed spec refuses to start.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_usage.h"
#include "common/data_root.h"
#include "common/grpc_health.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_server_limits.h"
#include "common/grpc_security.h"
#include "common/shutdown_signal.h"
#include "grpcpp/grpcpp.h"
#include "worker/daemon/collective_network.h"
#include "worker/daemon/failpoints.h"
#include "worker/daemon/graceful_stop.h"
#include "worker/daemon/orphan_aborter.h"
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
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this worker presents (server and client); needs --tls_key, --tls_ca");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA of the cluster: verifies the coordinator and every caller's client certificate");
ABSL_FLAG(std::string, worker_token_file, "",
          "file holding the worker credential, presented to the coordinator and required of "
          "every caller");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --listen without TLS and the worker credential");
ABSL_FLAG(std::string, collective_interface, "",
          "network interface for collectives across hosts (e.g. eth1, ib0): its address is what "
          "Gloo peers dial when --host is not given, and NCCL bootstraps over it "
          "(NCCL_SOCKET_IFNAME)");
ABSL_FLAG(std::string, nccl_env, "",
          "NCCL settings for this worker, KEY=VALUE,... with NCCL_ keys (e.g. "
          "NCCL_IB_HCA=mlx5_0,NCCL_DEBUG=WARN); set before any NCCL call");
ABSL_FLAG(std::string, failpoints, "",
          "fault injection for recovery tests, NAME@step=N[,rank=R][,ms=M][,steps=K];... with NAME one of "
          "exit, hang, fail_collective, corrupt_checkpoint, slow (worker/daemon/failpoints.h); "
          "default: $TESSERA_FAILPOINTS; empty: none");
ABSL_FLAG(std::string, data_trace_dir, "",
          "a directory where each rank of a job with data.sources appends one line per "
          "training sequence it reads (step, slot, source, epoch, sequence, file, offset) to "
          "data-trace-rank-R.txt, for auditing the data order; also TESSERA_DATA_TRACE_DIR. "
          "Empty: no trace");
ABSL_FLAG(std::string, data_root, "",
          "existing directory this worker may write checkpoints in (empty: anywhere)");
ABSL_FLAG(int32_t, suspend_grace_s, tessera::kDefaultSuspendGraceSeconds,
          "on SIGTERM, seconds to wait for the coordinator to suspend the job running here (a "
          "checkpoint at the next step boundary, then release) before aborting it; the job must "
          "have checkpoint.dir. 0: abort at once. Keep it below the stop timeout of systemd "
          "(TimeoutStopSec) or Kubernetes (terminationGracePeriodSeconds)");

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
  tessera::ConfigureDaemonUsage("tessera-worker",
                                {"worker/tessera_worker_main.cc", "common/grpc_server_limits.cc"});
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
  tessera::ServerSecurityFlags security_flags;
  security_flags.program = "tessera-worker";
  security_flags.listen = listen;
  security_flags.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                        absl::GetFlag(FLAGS_tls_ca)};
  security_flags.worker_token_file = absl::GetFlag(FLAGS_worker_token_file);
  security_flags.insecure = absl::GetFlag(FLAGS_insecure);
  absl::StatusOr<tessera::ServerSecurity> security = tessera::LoadServerSecurity(security_flags);
  if (!security.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::string> data_root =
      tessera::CanonicalDataRoot("--data_root", absl::GetFlag(FLAGS_data_root));
  if (!data_root.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", std::string(data_root.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<tessera::GrpcServerLimits> limits = tessera::GrpcServerLimitsFromFlags();
  if (!limits.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", std::string(limits.status().message()).c_str());
    return 2;
  }
  const std::string listen_host = HostOf(listen);
  const std::string interface = absl::GetFlag(FLAGS_collective_interface);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> nccl_env =
      tessera::ParseNcclEnv(absl::GetFlag(FLAGS_nccl_env));
  absl::Status network = nccl_env.status();
  if (network.ok()) network = tessera::ApplyCollectiveEnvironment(interface, *nccl_env);
  absl::StatusOr<std::string> interface_address = std::string();
  if (network.ok() && !interface.empty()) {
    interface_address = tessera::InterfaceAddress(interface);
    network = interface_address.status();
  }
  if (!network.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", std::string(network.message()).c_str());
    return 2;
  }
  // Peers and the coordinator need a name they can dial: --host, else the
  // --collective_interface's address, else the --listen host (for a
  // wildcard, the machine's host name).
  std::string host = absl::GetFlag(FLAGS_host);
  if (host.empty()) host = *interface_address;
  if (host.empty()) host = IsWildcard(listen_host) ? info->host() : listen_host;

  std::string failpoint_spec = absl::GetFlag(FLAGS_failpoints);
  if (failpoint_spec.empty()) {
    const char* env = std::getenv(tessera::Failpoints::kEnvironmentVariable);
    if (env != nullptr) failpoint_spec = env;
  }
  absl::StatusOr<std::vector<tessera::Failpoint>> armed = tessera::Failpoints::Parse(failpoint_spec);
  if (!armed.ok()) {
    std::fprintf(stderr, "tessera-worker: --failpoints / %s: %s\n",
                 tessera::Failpoints::kEnvironmentVariable,
                 std::string(armed.status().message()).c_str());
    return 2;
  }
  tessera::Failpoints failpoints(*armed);
  if (!failpoints.empty()) {
    std::printf("tessera-worker: failpoints armed: %s\n", failpoints.ToString().c_str());
    std::fflush(stdout);
  }

  std::string data_trace_dir = absl::GetFlag(FLAGS_data_trace_dir);
  if (data_trace_dir.empty()) {
    const char* env = std::getenv("TESSERA_DATA_TRACE_DIR");
    if (env != nullptr) data_trace_dir = env;
  }
  tessera::WorkerCore core([device, data_trace_dir](const tessera::v1::JobSpec& spec) {
    return tessera::CreateTrainer(device, spec, data_trace_dir);
  });
  if (!failpoints.empty()) core.set_failpoints(&failpoints);
  tessera::JobLog job_log;  // each job's lines: stderr, and `tessera logs`
  core.set_job_log(&job_log);
  tessera::WorkerServiceSecurity service_security;
  service_security.access = security->access;
  service_security.coordinator_credentials = security->outgoing;
  service_security.data_root = *data_root;
  tessera::WorkerServiceImpl service(&core, host, service_security, &job_log);
  tessera::EnableHealthAndReflection();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, security->server_credentials, &port);
  builder.RegisterService(&service);
  tessera::ApplyServerKeepalive(builder);
  tessera::ApplyGrpcServerLimits(*limits, builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "tessera-worker: --listen=%s: cannot listen there\n", listen.c_str());
    return 1;
  }
  const std::vector<std::string> services = {tessera::v1::WorkerService::service_full_name()};
  tessera::SetServing(server.get(), services, true);
  const std::string address =
      absl::StrCat(IsWildcard(listen_host) ? host : listen_host, ":", port);

  tessera::v1::RegisterWorkerRequest request;
  request.set_address(address);
  *request.mutable_device() = *info;
  bool announced = false;  // touched on the registration thread only
  // Jobs the coordinator no longer runs here (it ended while this worker was
  // stopped or cut off, or the coordinator restarted) are aborted off the
  // heartbeat thread.
  tessera::OrphanAborter orphans([&core](const std::string& job_id) {
    std::printf("tessera-worker: aborting %s: the coordinator no longer runs it here\n",
                job_id.c_str());
    std::fflush(stdout);
    core.Abort(job_id, "the coordinator no longer runs this job on this worker").IgnoreError();
  });
  tessera::Registration registration(
      absl::GetFlag(FLAGS_coordinator), request,
      [&core, &server, &services] {
        // A sticky device error is for good: the health service says so too.
        const bool healthy = core.healthy();
        if (!healthy) tessera::SetServing(server.get(), services, false);
        return tessera::Registration::Health{healthy, core.health_reason(), core.Activity()};
      },
      [&](const std::string& id) {
        if (!announced) {
          std::printf("tessera-worker %s serving on %s device=%s\n", id.c_str(), address.c_str(),
                      device.c_str());
          announced = true;
        } else {
          std::printf("tessera-worker registered again as %s\n", id.c_str());
        }
        std::fflush(stdout);
      },
      security->outgoing);
  registration.set_on_abort([&orphans](const std::string& job_id) { orphans.Request(job_id); });
  registration.Start();

  const int sig = tessera::WaitForShutdownSignal();
  tessera::SetServing(server.get(), services, false);
  std::printf("tessera-worker: signal %d, shutting down\n", sig);
  std::fflush(stdout);
  if (sig == SIGTERM) {
    const int grace_s = std::max(0, absl::GetFlag(FLAGS_suspend_grace_s));
    const tessera::GracefulStop stop = tessera::SuspendBeforeStopping(
        core, [&registration] { return registration.AnnounceStopping(); },
        absl::Seconds(grace_s));
    if (stop.outcome != tessera::GracefulStop::Outcome::kIdle) {
      std::printf("tessera-worker: %s\n", stop.message.c_str());
      std::fflush(stdout);
    }
  }
  core.Abort("", "worker shutting down").IgnoreError();
  registration.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return 0;
}

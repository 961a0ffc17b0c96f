// tessera-coordinator: serves the v1 API (Coordinator, WorkerRegistry,
// Rendezvous) and runs the scheduler. Prints "tessera-coordinator listening
// on ADDR" once serving; SIGINT/SIGTERM cancel running jobs (aborting their
// workers) and shut down cleanly; SIGHUP rereads --quota_file (a bad file
// keeps the quotas in force and says why). Security flags (TLS, tokens,
// --insecure, --data_root) are described in README.md's operator section;
// grpc.health.v1.Health and server reflection are always on.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/daemon_usage.h"
#include "common/data_root.h"
#include "common/grpc_health.h"
#include "common/grpc_keepalive.h"
#include "common/grpc_server_limits.h"
#include "common/grpc_security.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "server/call_guard.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/metrics_tracker.h"
#include "server/prometheus_metrics.h"
#include "server/status_page.h"
#include "server/straggler_detector.h"
#include "server/worker_client.h"
#include "server/worker_quotas.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "host:port to serve the API on");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port workers use to reach this coordinator's Rendezvous service "
          "(default: --listen, with 0.0.0.0 replaced by this host's name)");
ABSL_FLAG(std::string, state_dir, "/tmp/tessera-coordinator",
          "directory where job records are persisted");
ABSL_FLAG(int, worker_timeout_ms, 5000, "a worker silent this long leaves the registry");
ABSL_FLAG(int, heartbeat_interval_ms, 1000, "heartbeat interval asked of workers");
ABSL_FLAG(int, collective_timeout_ms, 60000,
          "per-collective timeout on workers (a rank whose peers stopped fails ABORTED)");
ABSL_FLAG(int, setup_timeout_ms, 900000,
          "bound on each SetupJob, InitCollective and Checkpoint call (building shards, loading "
          "and verifying a checkpoint, joining the collective group); at least the collective "
          "timeout + 60 s");
ABSL_FLAG(int, starvation_timeout_s, 300,
          "a queued job the registered workers could run that has waited this long stops "
          "later jobs of its device kind from starting before it (0: strict FIFO among "
          "runnable jobs)");
ABSL_FLAG(std::string, quota_file, "",
          "file of per-user limits on workers held at once, one `USER MAX_WORKERS` a line "
          "(`*` for users not listed, `unlimited`, # comments); reread on SIGHUP; a job over "
          "its owner's quota waits (empty: no limits)");
ABSL_FLAG(int, max_watch_streams, tessera::kDefaultMaxWatchStreams,
          "open WatchJob streams allowed at once (they hold no server thread); one more is "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this server presents (also its client certificate to workers)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signs every cluster certificate; verifies workers' client certificates");
ABSL_FLAG(std::string, user_tokens_file, "",
          "file of user tokens that may call the client API, one a line as `NAME ROLE TOKEN` "
          "(ROLE: user, or admin to act on every user's jobs)");
ABSL_FLAG(std::string, worker_token_file, "",
          "file holding the worker credential: registration, heartbeats, rendezvous, and "
          "what this coordinator presents to workers");
ABSL_FLAG(bool, require_client_cert, false,
          "refuse the TLS handshake to any peer without a client certificate signed by "
          "--tls_ca (users too: give the CLI --tls_cert and --tls_key), so that no peer without "
          "one reaches the gRPC layer; see README's \"Running on a shared network\"");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --listen without TLS and tokens (never on a shared network)");
ABSL_FLAG(std::string, data_root, "",
          "existing directory every job's checkpoint.dir must lie in (empty: any)");
ABSL_FLAG(int, drain_grace_ms, 0,
          "on SIGTERM, report NOT_SERVING this long before shutting down (lets load balancers "
          "and probes notice)");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port for Prometheus metrics over plain HTTP at /metrics (empty: off)");
ABSL_FLAG(double, slow_rank_threshold, tessera::StragglerOptions().threshold,
          "name a rank slow when its median compute time per step (step time less waits on "
          "collectives) over the window is more than this fraction above the median rank's "
          "(0.1: 10% slower); in [0.01, 10]");
ABSL_FLAG(int, slow_rank_window_steps, tessera::StragglerOptions().window_steps,
          "steps each rank's median compute time covers for slow-rank detection; in [5, 100000]");
ABSL_FLAG(std::string, web_listen, "",
          "host:port for the status page (jobs, workers, live loss charts) over plain HTTP; "
          "read-only and unauthenticated, so a loopback or trusted address (empty: off)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tessera-coordinator --listen=HOST:PORT --state_dir=DIR: the Tessera coordinator");
  tessera::ConfigureDaemonUsage("tessera-coordinator",
                                {"server/coordinator_main.cc", "common/grpc_server_limits.cc"});
  absl::ParseCommandLine(argc, argv);

  tessera::BlockShutdownAndReloadSignals();  // before any thread starts
  tessera::IgnoreBrokenPipeSignals();

  const std::string listen = absl::GetFlag(FLAGS_listen);
  tessera::ServerSecurityFlags security_flags;
  security_flags.program = "tessera-coordinator";
  security_flags.listen = listen;
  security_flags.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                        absl::GetFlag(FLAGS_tls_ca)};
  security_flags.user_tokens_file = absl::GetFlag(FLAGS_user_tokens_file);
  security_flags.worker_token_file = absl::GetFlag(FLAGS_worker_token_file);
  security_flags.has_user_api = true;
  security_flags.insecure = absl::GetFlag(FLAGS_insecure);
  security_flags.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  absl::StatusOr<tessera::ServerSecurity> security = tessera::LoadServerSecurity(security_flags);
  if (!security.ok()) {
    std::fprintf(stderr, "tessera-coordinator: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  if (const std::string warning = tessera::OpenHandshakeWarning(security_flags);
      !warning.empty()) {
    std::fprintf(stderr, "%s\n", warning.c_str());
  }
  if (security->unnamed_user_tokens > 0) {
    std::fprintf(stderr,
                 "tessera-coordinator: WARNING: %d user token(s) in --user_tokens_file name no "
                 "user; each acts as an admin named token-<digest>. Write `NAME ROLE TOKEN` "
                 "lines (README: \"Operating a shared cluster\")\n",
                 security->unnamed_user_tokens);
  }
  absl::StatusOr<std::string> data_root =
      tessera::CanonicalDataRoot("--data_root", absl::GetFlag(FLAGS_data_root));
  if (!data_root.ok()) {
    std::fprintf(stderr, "tessera-coordinator: %s\n",
                 std::string(data_root.status().message()).c_str());
    return 2;
  }
  const std::string quota_file = absl::GetFlag(FLAGS_quota_file);
  tessera::WorkerQuotas quotas;
  if (!quota_file.empty()) {
    absl::StatusOr<tessera::WorkerQuotas> read = tessera::ReadWorkerQuotaFile(quota_file);
    if (!read.ok()) {
      std::fprintf(stderr, "tessera-coordinator: --quota_file: %s\n",
                   std::string(read.status().message()).c_str());
      return 2;
    }
    quotas = *std::move(read);
    std::printf("tessera-coordinator: quotas from %s: %s\n", quota_file.c_str(),
                quotas.Summary().c_str());
    if (security_flags.user_tokens_file.empty()) {
      std::fprintf(stderr,
                   "tessera-coordinator: WARNING: --quota_file limits users, but without "
                   "--user_tokens_file jobs have no owner, so no quota applies\n");
    }
  }
  absl::StatusOr<tessera::GrpcServerLimits> limits = tessera::GrpcServerLimitsFromFlags();
  if (!limits.ok()) {
    std::fprintf(stderr, "tessera-coordinator: %s\n", std::string(limits.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_max_watch_streams) < 1) {
    std::fprintf(stderr, "tessera-coordinator: --max_watch_streams: must be >= 1\n");
    return 2;
  }
  tessera::StragglerOptions slow_ranks;
  slow_ranks.threshold = absl::GetFlag(FLAGS_slow_rank_threshold);
  slow_ranks.window_steps = absl::GetFlag(FLAGS_slow_rank_window_steps);
  if (absl::Status s = tessera::ValidateStragglerOptions(slow_ranks); !s.ok()) {
    std::fprintf(stderr, "tessera-coordinator: --%s\n", std::string(s.message()).c_str());
    return 2;
  }
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
  options.data_root = *data_root;
  options.rendezvous_address = advertise;
  options.worker_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_worker_timeout_ms));
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.collective_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_collective_timeout_ms));
  options.starvation_timeout = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_starvation_timeout_s)));
  options.slow_ranks = slow_ranks;
  options.quotas = quotas;
  // Above the collective timeout (InitCollective waits in a rendezvous) and,
  // by default, above the step watchdog's default: the timeout hierarchy.
  const absl::Duration setup_timeout =
      std::max(absl::Milliseconds(absl::GetFlag(FLAGS_setup_timeout_ms)),
               options.collective_timeout + absl::Seconds(60));
  std::shared_ptr<const tessera::ClientCredentials> to_workers = security->outgoing;
  options.connect = [setup_timeout, to_workers](const std::string& address) {
    return std::make_unique<tessera::WorkerClient>(address, setup_timeout, to_workers);
  };

  tessera::Coordinator core(options);
  if (absl::Status s = core.Start(); !s.ok()) {
    std::fprintf(stderr, "tessera-coordinator: %s\n", s.ToString().c_str());
    return 1;
  }
  // What /metrics and the status page read: the coordinator's own state.
  tessera::MetricsSource source;
  source.list_jobs = [&core] {
    return tessera::ListAllJobs([&core](const std::string& token)
                                    -> absl::StatusOr<std::pair<std::vector<tessera::v1::Job>,
                                                                std::string>> {
      ASSIGN_OR_RETURN(tessera::Coordinator::JobPage page, core.ListJobs({}, 1000, token));
      return std::make_pair(std::move(page.jobs), page.next_page_token);
    });
  };
  source.list_workers = [&core] { return core.ListWorkers(); };
  source.job_events = [&core](const std::string& id) { return core.JobEvents(id); };
  source.worker_losses = [&core] { return core.WorkerLosses(); };
  source.get_job = [&core](const std::string& id) { return core.GetJob(id); };
  // An HTTP listener that cannot start ends the coordinator, naming its flag.
  auto refuse_to_start = [&core](const absl::Status& s) {
    std::fprintf(stderr, "tessera-coordinator: %s\n", std::string(s.message()).c_str());
    core.Shutdown();
    return 2;
  };
  std::unique_ptr<tessera::PrometheusMetrics> metrics;
  if (const std::string listen_at = absl::GetFlag(FLAGS_metrics_listen); !listen_at.empty()) {
    absl::StatusOr<std::unique_ptr<tessera::PrometheusMetrics>> started =
        tessera::PrometheusMetrics::Start(listen_at, source);
    if (!started.ok()) return refuse_to_start(started.status());
    metrics = *std::move(started);
    std::printf("tessera-coordinator metrics on http://%s/metrics\n", metrics->address().c_str());
  }
  std::unique_ptr<tessera::StatusPage> status_page;
  if (const std::string listen_at = absl::GetFlag(FLAGS_web_listen); !listen_at.empty()) {
    absl::StatusOr<std::unique_ptr<tessera::StatusPage>> started =
        tessera::StatusPage::Start(listen_at, source);
    if (!started.ok()) return refuse_to_start(started.status());
    status_page = *std::move(started);
    std::printf("tessera-coordinator status page on http://%s/\n", status_page->address().c_str());
  }
  tessera::CallGuard guard(security->access, &core);
  tessera::CoordinatorService coordinator_service(&core, &guard,
                                                  absl::GetFlag(FLAGS_max_watch_streams));
  tessera::WorkerRegistryService registry_service(&core, &guard);
  tessera::RendezvousService rendezvous_service(&core, &guard);

  tessera::EnableHealthAndReflection();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(listen, security->server_credentials, &bound_port);
  builder.RegisterService(&coordinator_service);
  builder.RegisterService(&registry_service);
  builder.RegisterService(&rendezvous_service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  tessera::ApplyServerKeepalive(builder);
  tessera::ApplyGrpcServerLimits(*limits, builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    std::fprintf(stderr, "tessera-coordinator: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  const std::vector<std::string> services = {
      tessera::v1::Coordinator::service_full_name(),
      tessera::v1::WorkerRegistry::service_full_name(),
      tessera::v1::Rendezvous::service_full_name()};
  tessera::SetServing(server.get(), services, true);  // state loaded by core.Start()
  std::printf("tessera-coordinator listening on %s%s\n", listen.c_str(),
              security->secured ? " (TLS, tokens)" : "");
  std::fflush(stdout);

  int sig = 0;
  while ((sig = tessera::WaitForShutdownOrReloadSignal()) == SIGHUP) {
    if (quota_file.empty()) {
      std::printf("tessera-coordinator: SIGHUP: no --quota_file to reread\n");
    } else if (absl::StatusOr<tessera::WorkerQuotas> read =
                   tessera::ReadWorkerQuotaFile(quota_file);
               !read.ok()) {
      std::fprintf(stderr, "tessera-coordinator: SIGHUP: keeping the quotas in force: %s\n",
                   std::string(read.status().message()).c_str());
    } else {
      const std::string summary = read->Summary();
      core.SetQuotas(*std::move(read));
      std::printf("tessera-coordinator: SIGHUP: quotas reloaded from %s: %s\n",
                  quota_file.c_str(), summary.c_str());
    }
    std::fflush(stdout);
    std::fflush(stderr);
  }
  tessera::SetServing(server.get(), services, false);
  std::printf("tessera-coordinator: signal %d, shutting down\n", sig);
  std::fflush(stdout);
  absl::SleepFor(absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_drain_grace_ms))));
  core.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

// TLS, tokens, worker sessions, the data root and safe defaults, end to end:
// a coordinator and two CPU workers on loopback with mTLS and both
// credentials (certificates made by make_test_certs.sh with openssl), probed
// with raw gRPC stubs and driven through the CLI.
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "tests/process_harness.h"
#include "tests/test_cluster_credentials.h"

namespace tessera {
namespace {

using ::tessera::testing::BinaryPath;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::CommandResult;
using ::tessera::testing::MakeTempDir;
using ::tessera::testing::PickFreePort;
using ::tessera::testing::RunCommand;
using ::tessera::testing::TestClusterCredentials;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("security"));
    absl::StatusOr<TestClusterCredentials> credentials =
        TestClusterCredentials::Make(*dir_ + "/certs");
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    credentials_ = new TestClusterCredentials(*std::move(credentials));
    ASSERT_EQ(mkdir((*dir_ + "/root").c_str(), 0755), 0);
    address_ = new std::string(absl::StrCat("127.0.0.1:", PickFreePort()));
    auto coordinator = ChildProcess::Start(
        BinaryPath("server/tessera-coordinator"),
        credentials_->CoordinatorFlags(
            {"--listen=" + *address_, "--state_dir=" + *dir_ + "/state", "--data_root=" + *dir_}),
        *dir_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = coordinator->release();
    ASSERT_TRUE(coordinator_->WaitForLine("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();
    for (int i = 0; i < 2; ++i) {
      auto worker = ChildProcess::Start(
          BinaryPath("worker/tessera-worker"),
          credentials_->WorkerFlags(
              {"--coordinator=" + *address_, "--device=cpu", "--data_root=" + *dir_ + "/root"}),
          absl::StrCat(*dir_, "/worker-", i, ".log"));
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_[i] = worker->release();
      ASSERT_TRUE(workers_[i]->WaitForLine("serving on", absl::Seconds(30)).ok())
          << workers_[i]->Log();
    }
  }

  static void TearDownTestSuite() {
    for (ChildProcess*& w : workers_) {
      delete w;
      w = nullptr;
    }
    delete coordinator_;
    coordinator_ = nullptr;
  }

  static std::string Cert(const std::string& name) { return credentials_->Path(name); }

  // A channel presenting `cert` ("" for none) and trusting the cluster CA.
  static std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                                   const std::string& cert = "node") {
    return credentials_->Channel(address, cert);
  }

  static void Prepare(grpc::ClientContext* context, const std::string& token,
                      const std::string& session = "") {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    if (!session.empty()) context->AddMetadata("x-tessera-worker-session", session);
  }

  static grpc::StatusCode ListWorkersAs(const std::shared_ptr<grpc::Channel>& channel,
                                        const std::string& token) {
    auto stub = v1::Coordinator::NewStub(channel);
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::ListWorkersResponse response;
    return stub->ListWorkers(&context, v1::ListWorkersRequest(), &response).error_code();
  }

  static grpc::StatusCode RegisterAs(const std::shared_ptr<grpc::Channel>& channel,
                                     const std::string& token) {
    auto stub = v1::WorkerRegistry::NewStub(channel);
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::RegisterWorkerRequest request;
    request.set_address("127.0.0.1:1");
    request.mutable_device()->set_kind(v1::CPU);
    v1::RegisterWorkerResponse response;
    return stub->RegisterWorker(&context, request, &response).error_code();
  }

  std::string UserToken() { return credentials_->UserToken(); }
  std::string WorkerToken() { return credentials_->WorkerToken(); }

  std::vector<std::string> CliFlags() {
    return {"--coordinator=" + *address_, "--tls_ca=" + Cert("ca.pem"),
            "--token_file=" + Cert("user.token")};
  }

  std::string JobFile(const std::string& name, const std::string& checkpoint_dir) {
    const std::string path = *dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {vocab_size: 256, d_model: 32, n_layers: 1, n_heads: 2, "
                           "ffn_dim: 64, seq_len: 16}\n"
                        << "data: {synthetic: {task: COPY}, micro_batch_size: 2}\n"
                        << "optimizer: {lr: 0.003, warmup_steps: 1}\n"
                        << "world_size: 2\ndevice_kind: CPU\nsteps: 4\nseed: 3\n"
                        << "checkpoint: {dir: " << checkpoint_dir << ", interval_steps: 2}\n";
    return path;
  }

  std::string Logs() {
    std::string out = "--- coordinator ---\n" + coordinator_->Log();
    for (ChildProcess* w : workers_) out += "--- worker ---\n" + w->Log();
    return out;
  }

  static std::string* dir_;
  static TestClusterCredentials* credentials_;
  static std::string* address_;
  static ChildProcess* coordinator_;
  static ChildProcess* workers_[2];
};

std::string* SecurityTest::dir_ = nullptr;
TestClusterCredentials* SecurityTest::credentials_ = nullptr;
std::string* SecurityTest::address_ = nullptr;
ChildProcess* SecurityTest::coordinator_ = nullptr;
ChildProcess* SecurityTest::workers_[2] = {nullptr, nullptr};

TEST_F(SecurityTest, PlaintextClientCannotTalkToTlsCoordinator) {
  EXPECT_EQ(ListWorkersAs(grpc::CreateChannel(*address_, grpc::InsecureChannelCredentials()),
                          UserToken()),
            grpc::StatusCode::UNAVAILABLE);
  CommandResult cli =
      RunCommand(BinaryPath("client/tessera"),
                 {"workers", "--coordinator=" + *address_, "--token_file=" + Cert("user.token")},
                 absl::Seconds(60));
  EXPECT_NE(cli.exit_code, 0) << cli.output;
}

TEST_F(SecurityTest, MissingOrWrongTokenIsUnauthenticated) {
  auto channel = TlsChannel(*address_, "");
  EXPECT_EQ(ListWorkersAs(channel, ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListWorkersAs(channel, "not-the-token-0123456789"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListWorkersAs(channel, UserToken()), grpc::StatusCode::OK);
  CommandResult cli = RunCommand(
      BinaryPath("client/tessera"),
      {"workers", "--coordinator=" + *address_, "--tls_ca=" + Cert("ca.pem")}, absl::Seconds(30));
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_NE(cli.output.find("UNAUTHENTICATED"), std::string::npos) << cli.output;
}

TEST_F(SecurityTest, EachCredentialOpensOnlyItsOwnApi) {
  auto channel = TlsChannel(*address_);
  EXPECT_EQ(RegisterAs(channel, UserToken()), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListWorkersAs(channel, WorkerToken()), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, CheckpointSuspendAndResumeNeedTheUserCredentialLikeCancel) {
  auto stub = v1::Coordinator::NewStub(TlsChannel(*address_));
  for (const auto& [token, want] : std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {WorkerToken(), grpc::StatusCode::PERMISSION_DENIED},
           {UserToken(), grpc::StatusCode::NOT_FOUND}}) {
    v1::Job job;
    grpc::ClientContext checkpoint, suspend, resume, cancel;
    for (grpc::ClientContext* c : {&checkpoint, &suspend, &resume, &cancel}) Prepare(c, token);
    v1::CheckpointJobRequest checkpoint_request;
    checkpoint_request.set_job_id("job-999");
    EXPECT_EQ(stub->CheckpointJob(&checkpoint, checkpoint_request, &job).error_code(), want);
    v1::SuspendJobRequest suspend_request;
    suspend_request.set_job_id("job-999");
    EXPECT_EQ(stub->SuspendJob(&suspend, suspend_request, &job).error_code(), want);
    v1::ResumeJobRequest resume_request;
    resume_request.set_job_id("job-999");
    EXPECT_EQ(stub->ResumeJob(&resume, resume_request, &job).error_code(), want);
    v1::CancelJobRequest cancel_request;
    cancel_request.set_job_id("job-999");
    EXPECT_EQ(stub->CancelJob(&cancel, cancel_request, &job).error_code(), want);
  }
  // Holding or ending a worker's steps takes the worker credential; a worker
  // knows no user token at all.
  grpc::ClientContext context;
  Prepare(&context, UserToken());
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(stub->ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok());
  ASSERT_GT(workers.workers_size(), 0);
  auto worker = v1::WorkerService::NewStub(TlsChannel(workers.workers(0).address()));
  grpc::ClientContext hold, end;
  Prepare(&hold, UserToken());
  Prepare(&end, UserToken());
  v1::HoldStepsResponse held;
  EXPECT_EQ(worker->HoldSteps(&hold, v1::HoldStepsRequest(), &held).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::EndChunkAtResponse ended;
  EXPECT_EQ(worker->EndChunkAt(&end, v1::EndChunkAtRequest(), &ended).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, WorkerWithoutClientCertificateCannotRegister) {
  EXPECT_EQ(RegisterAs(TlsChannel(*address_, ""), WorkerToken()),
            grpc::StatusCode::UNAUTHENTICATED);
  // A certificate from another CA does not even complete the handshake.
  EXPECT_NE(RegisterAs(TlsChannel(*address_, "rogue"), WorkerToken()), grpc::StatusCode::OK);
  EXPECT_EQ(RegisterAs(TlsChannel(*address_, ""), ""), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, OnlyTheWorkerCredentialReachesWorkersHeartbeatsAndRendezvous) {
  auto coordinator = TlsChannel(*address_);
  v1::ListWorkersResponse workers;
  {
    grpc::ClientContext context;
    Prepare(&context, UserToken());
    ASSERT_TRUE(v1::Coordinator::NewStub(coordinator)
                    ->ListWorkers(&context, v1::ListWorkersRequest(), &workers)
                    .ok());
  }
  ASSERT_EQ(workers.workers_size(), 2);
  const v1::WorkerRecord& target = workers.workers(0);

  // The worker's own service: a client certificate is required, then the
  // worker credential.
  for (const auto& [cert, token] : std::vector<std::pair<std::string, std::string>>{
           {"", WorkerToken()}, {"node", ""}, {"node", UserToken()}}) {
    auto stub = v1::WorkerService::NewStub(TlsChannel(target.address(), cert));
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::AbortRequest request;
    v1::AbortResponse response;
    grpc::Status status = stub->Abort(&context, request, &response);
    EXPECT_FALSE(status.ok()) << "cert=" << cert << " token=" << token.size();
  }
  {
    auto stub = v1::WorkerService::NewStub(TlsChannel(target.address()));
    grpc::ClientContext context;
    Prepare(&context, WorkerToken());
    v1::WorkerStatus status;
    EXPECT_TRUE(stub->GetWorkerStatus(&context, v1::GetWorkerStatusRequest(), &status).ok());
  }

  // Heartbeats: a user token is refused; the worker credential alone cannot
  // speak for a registered worker without that worker's session.
  auto registry = v1::WorkerRegistry::NewStub(coordinator);
  for (const std::string& token : {UserToken(), WorkerToken()}) {
    grpc::ClientContext context;
    Prepare(&context, token, token == WorkerToken() ? "forged-session" : "");
    v1::HeartbeatRequest request;
    request.set_worker_id(target.worker_id());
    request.set_healthy(false);
    request.set_health_reason("spoofed");
    v1::HeartbeatResponse response;
    EXPECT_FALSE(registry->Heartbeat(&context, request, &response).ok());
  }

  // Rendezvous keys: refused without the worker credential, and with it but
  // without the session of a rank of the job.
  auto rendezvous = v1::Rendezvous::NewStub(coordinator);
  for (const std::string& token : {std::string(), UserToken(), WorkerToken()}) {
    grpc::ClientContext context;
    Prepare(&context, token);
    v1::RendezvousSetRequest request;
    request.set_job_id("job-1");
    request.set_key("nccl_id");
    request.set_value("attacker");
    v1::RendezvousSetResponse response;
    grpc::Status status = rendezvous->RendezvousSet(&context, request, &response);
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                status.error_code() == grpc::StatusCode::PERMISSION_DENIED)
        << status.error_code() << " " << status.error_message();
  }

  // The spoofed heartbeat changed nothing.
  grpc::ClientContext context;
  Prepare(&context, UserToken());
  v1::ListWorkersResponse after;
  ASSERT_TRUE(v1::Coordinator::NewStub(coordinator)
                  ->ListWorkers(&context, v1::ListWorkersRequest(), &after)
                  .ok());
  for (const v1::WorkerRecord& w : after.workers()) EXPECT_TRUE(w.healthy()) << w.DebugString();
}

TEST_F(SecurityTest, RightTokenRunsAJobThroughTheCli) {
  std::vector<std::string> args = {"submit", JobFile("secured", *dir_ + "/root/ckpt"), "--watch"};
  for (const std::string& f : CliFlags()) args.push_back(f);
  CommandResult result = RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(120));
  ASSERT_EQ(result.exit_code, 0) << result.output << Logs();
  EXPECT_NE(result.output.find("SUCCEEDED"), std::string::npos) << result.output;
  EXPECT_TRUE(Exists(*dir_ + "/root/ckpt/step-4/COMMITTED"));
}

// `tessera health` is what systemd and Kubernetes exec probes run: it needs
// the CA (the kubelet's own gRPC probe cannot speak TLS) but no token.
TEST_F(SecurityTest, HealthCommandProbesOverTlsWithoutAToken) {
  const std::vector<std::string> tls = {"--coordinator=" + *address_, "--tls_ca=" + Cert("ca.pem")};
  auto health = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"health"};
    args.insert(args.end(), tls.begin(), tls.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(30));
  };
  CommandResult whole = health({});
  EXPECT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_EQ(whole.output, "SERVING\n");
  CommandResult coordinator = health({"--service=tessera.v1.Coordinator"});
  EXPECT_EQ(coordinator.exit_code, 0) << coordinator.output;
  EXPECT_EQ(coordinator.output, "SERVING\n");
  CommandResult unknown = health({"--service=no.such.Service"});
  EXPECT_NE(unknown.exit_code, 0) << unknown.output;
  EXPECT_NE(unknown.output.find("NOT_FOUND"), std::string::npos) << unknown.output;
  // Without the CA the TLS handshake fails: unreachable, not SERVING.
  CommandResult plaintext = RunCommand(BinaryPath("client/tessera"),
                                       {"health", "--coordinator=" + *address_},
                                       absl::Seconds(30));
  EXPECT_NE(plaintext.exit_code, 0) << plaintext.output;
}

TEST_F(SecurityTest, CheckpointOutsideTheDataRootIsRefusedAndNothingIsWritten) {
  // Outside the coordinator's root too: refused at submit time.
  std::vector<std::string> args = {"submit", JobFile("far", "/proc/tessera-ckpt")};
  for (const std::string& f : CliFlags()) args.push_back(f);
  CommandResult submit = RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(60));
  EXPECT_EQ(submit.exit_code, 1) << submit.output;
  EXPECT_NE(submit.output.find("INVALID_ARGUMENT"), std::string::npos) << submit.output;
  EXPECT_NE(submit.output.find("checkpoint.dir"), std::string::npos) << submit.output;

  // Inside the coordinator's root but outside the workers': the workers refuse.
  const std::string outside = *dir_ + "/elsewhere/ckpt";
  args = {"submit", JobFile("near", outside), "--watch"};
  for (const std::string& f : CliFlags()) args.push_back(f);
  CommandResult watched = RunCommand(BinaryPath("client/tessera"), args, absl::Seconds(120));
  EXPECT_EQ(watched.exit_code, 1) << watched.output;
  EXPECT_NE(watched.output.find("INVALID_ARGUMENT"), std::string::npos) << watched.output;
  EXPECT_NE(watched.output.find("outside the data root"), std::string::npos) << watched.output;
  EXPECT_FALSE(Exists(*dir_ + "/elsewhere")) << "something was written outside the data root";
}

TEST(SafeDefaultsTest, NonLoopbackListenWithoutCredentialsExitsWithOneLine) {
  const std::string dir = MakeTempDir("safe");
  for (const auto& [binary, extra] : std::vector<std::pair<std::string, std::string>>{
           {"server/tessera-coordinator", "--state_dir=" + dir + "/state"},
           {"worker/tessera-worker", "--device=cpu"}}) {
    CommandResult result =
        RunCommand(BinaryPath(binary), {"--listen=0.0.0.0:0", extra}, absl::Seconds(30));
    EXPECT_NE(result.exit_code, 0) << binary << ": " << result.output;
    std::vector<std::string> lines = absl::StrSplit(result.output, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 1u) << binary << ": " << result.output;
    EXPECT_NE(lines[0].find("--insecure"), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace tessera

// WorkerService with credentials and a data root, over loopback: every
// command needs the worker credential (UNAUTHENTICATED without it, so a user
// or a stranger cannot set up, step or abort a worker), and a checkpoint
// directory outside the data root is INVALID_ARGUMENT before anything is
// written, at SetupJob and at Checkpoint.
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/access_policy.h"
#include "common/data_root.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/loopback_server_for_test.h"
#include "worker/daemon/worker_service.h"

namespace tessera {
namespace {

constexpr char kWorkerToken[] = "worker-credential-0123456789";

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

class WorkerServiceSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(mkdir(base_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((base_ + "/root").c_str(), 0755), 0);
    WorkerServiceSecurity security;
    security.access = std::make_shared<AccessPolicy>(std::vector<std::string>{}, kWorkerToken,
                                                     /*worker_needs_client_cert=*/false);
    security.data_root = *CanonicalDataRoot("--data_root", base_ + "/root");
    core_ = std::make_unique<WorkerCore>([](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
      return std::unique_ptr<Trainer>(new FakeTrainer());
    });
    service_ = std::make_unique<WorkerServiceImpl>(core_.get(), "127.0.0.1", security);
    server_ = StartLoopbackServer({service_.get()});
    ASSERT_NE(server_.server, nullptr);
    stub_ = v1::WorkerService::NewStub(
        grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    core_->Abort("", "test over").IgnoreError();
    server_.server->Shutdown();
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!token.empty()) context->AddMetadata("authorization", BearerHeader(token));
    return context;
  }

  grpc::Status Setup(const std::string& token, const std::string& checkpoint_dir) {
    v1::SetupJobRequest request;
    request.set_job_id("job-1");
    request.set_world_size(1);
    request.mutable_spec()->mutable_model()->set_seq_len(16);
    request.mutable_spec()->mutable_data()->set_micro_batch_size(4);
    request.mutable_spec()->mutable_checkpoint()->set_dir(checkpoint_dir);
    v1::SetupJobResponse response;
    return stub_->SetupJob(Context(token).get(), request, &response);
  }

  std::string base_;
  std::unique_ptr<WorkerCore> core_;
  std::unique_ptr<WorkerServiceImpl> service_;
  LoopbackServer server_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
};

TEST_F(WorkerServiceSecurityTest, EveryCommandNeedsTheWorkerCredential) {
  for (const std::string& token : {std::string(), std::string("user-token-0123456789abc")}) {
    EXPECT_EQ(Setup(token, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::AbortResponse abort;
    EXPECT_EQ(stub_->Abort(Context(token).get(), v1::AbortRequest(), &abort).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::WorkerStatus status;
    EXPECT_EQ(stub_->GetWorkerStatus(Context(token).get(), v1::GetWorkerStatusRequest(), &status)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(Setup(kWorkerToken, "").ok());
}

TEST_F(WorkerServiceSecurityTest, CheckpointDirOutsideTheRootIsRefusedBeforeAnythingIsWritten) {
  grpc::Status refused = Setup(kWorkerToken, base_ + "/outside/ckpt");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("checkpoint.dir"), std::string::npos)
      << refused.error_message();
  EXPECT_FALSE(Exists(base_ + "/outside"));

  ASSERT_TRUE(Setup(kWorkerToken, base_ + "/root/ckpt").ok());
  v1::CheckpointRequest request;
  request.set_job_id("job-1");
  request.set_step(0);
  request.set_dir(base_ + "/root/../outside");
  v1::CheckpointResponse response;
  grpc::Status checkpoint = stub_->Checkpoint(Context(kWorkerToken).get(), request, &response);
  EXPECT_EQ(checkpoint.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(checkpoint.error_message().find("dir"), std::string::npos);
  EXPECT_FALSE(Exists(base_ + "/outside"));
}

}  // namespace
}  // namespace tessera

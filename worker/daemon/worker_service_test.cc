// WorkerService over loopback with fake trainers and a fake Rendezvous:
// two ranks go SetupJob -> InitCollective (exchanging hosts through the
// coordinator's rendezvous) -> RunSteps streams; commands out of order come
// back FAILED_PRECONDITION over the wire; Abort ends a stream mid-way; a
// faulted worker reports itself unhealthy and refuses new jobs.
#include "worker/daemon/worker_service.h"

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_rendezvous_service.h"
#include "worker/daemon/fake_trainer.h"
#include "worker/daemon/loopback_server_for_test.h"

namespace tessera {
namespace {

// One worker daemon minus registration: core, service, server and a stub.
struct Worker {
  Worker(FakeTrainerOptions options, const std::string& host)
      : core([options](const v1::JobSpec&) -> absl::StatusOr<std::unique_ptr<Trainer>> {
          return std::unique_ptr<Trainer>(new FakeTrainer(options));
        }),
        service(&core, host) {
    server = StartLoopbackServer({&service});
    if (server.server != nullptr) {
      stub = v1::WorkerService::NewStub(
          grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    }
  }
  ~Worker() {
    core.Abort("", "test over").IgnoreError();
    if (server.server != nullptr) server.server->Shutdown();
  }

  WorkerCore core;
  WorkerServiceImpl service;
  LoopbackServer server;
  std::unique_ptr<v1::WorkerService::Stub> stub;
};

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

grpc::Status SetupJobOn(Worker& w, const std::string& job, int rank, int world,
                   v1::SetupJobResponse* response = nullptr) {
  v1::SetupJobRequest request;
  request.set_job_id(job);
  request.set_rank(rank);
  request.set_world_size(world);
  request.mutable_spec()->mutable_model()->set_seq_len(16);
  request.mutable_spec()->mutable_data()->set_micro_batch_size(4);
  v1::SetupJobResponse ignored;
  return w.stub->SetupJob(Context().get(), request, response ? response : &ignored);
}

grpc::Status InitCollectiveOn(Worker& w, const std::string& job, const std::string& rendezvous,
                  const std::string& host = "") {
  v1::InitCollectiveRequest request;
  request.set_job_id(job);
  request.set_rendezvous_address(rendezvous);
  request.set_timeout_ms(5000);
  request.set_host(host);
  v1::InitCollectiveResponse response;
  return w.stub->InitCollective(Context().get(), request, &response);
}

grpc::Status RunStepsOn(Worker& w, const std::string& job, int first, int n,
                 std::vector<v1::StepResult>* results) {
  v1::RunStepsRequest request;
  request.set_job_id(job);
  request.set_first_step(first);
  request.set_num_steps(n);
  auto context = Context();
  auto reader = w.stub->RunSteps(context.get(), request);
  v1::StepResult result;
  while (reader->Read(&result)) results->push_back(result);
  return reader->Finish();
}

std::string Phase(Worker& w) {
  v1::WorkerStatus status;
  grpc::Status s = w.stub->GetWorkerStatus(Context().get(), v1::GetWorkerStatusRequest(), &status);
  return s.ok() ? status.phase() : "rpc failed: " + s.error_message();
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rendezvous_server_ = StartLoopbackServer({&rendezvous_});
    ASSERT_NE(rendezvous_server_.server, nullptr);
  }
  void TearDown() override { rendezvous_server_.server->Shutdown(); }

  FakeRendezvousService rendezvous_;
  LoopbackServer rendezvous_server_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(WorkerServiceTest, TwoRanksSetUpJoinAndStreamEveryStep) {
  FakeTrainerOptions options;
  options.exchange_hosts = true;
  Worker a(options, "host-a");
  Worker b(options, "host-b");
  ASSERT_NE(a.stub, nullptr);
  ASSERT_NE(b.stub, nullptr);
  v1::SetupJobResponse setup;
  ASSERT_TRUE(SetupJobOn(a, "job-7", 0, 2, &setup).ok());
  EXPECT_EQ(setup.total_parameters(), 1000);
  EXPECT_EQ(setup.shard_parameters(), 500);
  ASSERT_TRUE(SetupJobOn(b, "job-7", 1, 2).ok());
  EXPECT_EQ(Phase(a), "set_up");

  // Each rank's InitCollective waits for the other's host in the rendezvous.
  grpc::Status init_a;
  std::thread joiner([&] { init_a = InitCollectiveOn(a, "job-7", rendezvous_server_.address(), "10.0.0.7"); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Phase(a), "joining_collective");
  grpc::Status init_b = InitCollectiveOn(b, "job-7", rendezvous_server_.address());
  joiner.join();
  ASSERT_TRUE(init_a.ok()) << init_a.error_message();
  ASSERT_TRUE(init_b.ok()) << init_b.error_message();
  std::string host;
  ASSERT_TRUE(rendezvous_.Lookup("job-7", "host/0", &host));
  EXPECT_EQ(host, "10.0.0.7");  // the request's host wins
  ASSERT_TRUE(rendezvous_.Lookup("job-7", "host/1", &host));
  EXPECT_EQ(host, "host-b");  // else the daemon's own
  EXPECT_EQ(Phase(a), "collective_ready");

  const int first_chunk = 1 + static_cast<int>(rng_() % 4);
  const int second_chunk = 1 + static_cast<int>(rng_() % 4);
  for (Worker* w : {&a, &b}) {
    std::vector<v1::StepResult> results;
    ASSERT_TRUE(RunStepsOn(*w, "job-7", 0, first_chunk, &results).ok());
    grpc::Status s = RunStepsOn(*w, "job-7", first_chunk, second_chunk, &results);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(results.size(), static_cast<size_t>(first_chunk + second_chunk));
    const int rank = w == &a ? 0 : 1;
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(results[i].step(), static_cast<int>(i));
      EXPECT_EQ(results[i].rank(), rank);
      EXPECT_EQ(results[i].tokens(), 64);
      if (i > 0) {
        EXPECT_LT(results[i].loss(), results[i - 1].loss());
      }
    }
  }
  v1::CheckpointRequest ck;
  ck.set_job_id("job-7");
  ck.set_step(first_chunk + second_chunk);
  ck.set_dir("/tmp/ck");
  v1::CheckpointResponse path;
  ASSERT_TRUE(b.stub->Checkpoint(Context().get(), ck, &path).ok());
  EXPECT_EQ(path.path(), absl::StrCat("/tmp/ck/step-", first_chunk + second_chunk, "/rank-1.bin"));
  EXPECT_GT(path.bytes(), 0);
  // The write is reported by AwaitCheckpoint, for the step started only.
  v1::AwaitCheckpointRequest await;
  await.set_job_id("job-7");
  await.set_step(first_chunk + second_chunk);
  v1::AwaitCheckpointResponse written;
  ASSERT_TRUE(b.stub->AwaitCheckpoint(Context().get(), await, &written).ok());
  EXPECT_EQ(written.path(), path.path());
  await.set_step(first_chunk);
  EXPECT_EQ(b.stub->AwaitCheckpoint(Context().get(), await, &written).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(WorkerServiceTest, OutOfOrderCommandsAreFailedPreconditionOverGrpc) {
  Worker w(FakeTrainerOptions{}, "host");
  ASSERT_NE(w.stub, nullptr);
  std::vector<v1::StepResult> results;
  grpc::Status s = RunStepsOn(w, "job-3", 0, 1, &results);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(results.empty());
  s = InitCollectiveOn(w, "job-3", rendezvous_server_.address());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "InitCollective for job-3: worker is idle; SetupJob first");

  ASSERT_TRUE(SetupJobOn(w, "job-3", 0, 1).ok());
  EXPECT_EQ(SetupJobOn(w, "job-4", 0, 1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(RunStepsOn(w, "job-3", 0, 1, &results).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(InitCollectiveOn(w, "job-3", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(InitCollectiveOn(w, "job-4", rendezvous_server_.address()).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(InitCollectiveOn(w, "job-3", rendezvous_server_.address()).ok());
  EXPECT_EQ(RunStepsOn(w, "job-3", 5, 1, &results).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(results.empty());

  v1::AbortRequest abort;
  abort.set_job_id("job-3");
  v1::AbortResponse ignored;
  ASSERT_TRUE(w.stub->Abort(Context().get(), abort, &ignored).ok());
  ASSERT_TRUE(w.stub->Abort(Context().get(), abort, &ignored).ok());  // idempotent
  EXPECT_EQ(Phase(w), "idle");
  EXPECT_TRUE(SetupJobOn(w, "job-4", 0, 1).ok());
}

TEST_F(WorkerServiceTest, AbortEndsARunningStreamWithCancelled) {
  FakeTrainerOptions slow;
  slow.step_time = absl::Milliseconds(50);
  Worker w(slow, "host");
  ASSERT_NE(w.stub, nullptr);
  ASSERT_TRUE(SetupJobOn(w, "job-1", 0, 1).ok());
  ASSERT_TRUE(InitCollectiveOn(w, "job-1", rendezvous_server_.address()).ok());

  v1::RunStepsRequest request;
  request.set_job_id("job-1");
  request.set_first_step(0);
  request.set_num_steps(10000);
  auto context = Context(absl::Seconds(30));
  auto reader = w.stub->RunSteps(context.get(), request);
  v1::StepResult result;
  // Results arrive as steps finish, not at the end.
  ASSERT_TRUE(reader->Read(&result));
  EXPECT_EQ(result.step(), 0);
  ASSERT_TRUE(reader->Read(&result));
  EXPECT_EQ(result.step(), 1);
  EXPECT_EQ(Phase(w), "running");

  v1::AbortRequest abort;
  abort.set_job_id("job-1");
  abort.set_reason("user asked");
  v1::AbortResponse ignored;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(w.stub->Abort(Context().get(), abort, &ignored).ok());
  int more = 0;
  while (reader->Read(&result)) ++more;
  grpc::Status s = reader->Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_LT(more, 10);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_NE(s.error_message().find("user asked"), std::string::npos);
  EXPECT_EQ(Phase(w), "idle");
}

TEST_F(WorkerServiceTest, FaultedWorkerReportsUnhealthyAndRefusesJobs) {
  FakeTrainerOptions faulty;
  faulty.fail_at_step = 0;
  faulty.fail_code = absl::StatusCode::kDataLoss;
  Worker w(faulty, "host");
  ASSERT_NE(w.stub, nullptr);
  ASSERT_TRUE(SetupJobOn(w, "job-1", 0, 1).ok());
  ASSERT_TRUE(InitCollectiveOn(w, "job-1", rendezvous_server_.address()).ok());
  std::vector<v1::StepResult> results;
  EXPECT_EQ(RunStepsOn(w, "job-1", 0, 2, &results).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_TRUE(results.empty());
  v1::WorkerStatus status;
  ASSERT_TRUE(w.stub->GetWorkerStatus(Context().get(), {}, &status).ok());
  EXPECT_FALSE(status.healthy());
  EXPECT_EQ(status.phase(), "unhealthy");
  EXPECT_NE(status.health_reason().find("injected failure"), std::string::npos);
  v1::AbortRequest abort;
  v1::AbortResponse ignored;
  ASSERT_TRUE(w.stub->Abort(Context().get(), abort, &ignored).ok());
  EXPECT_EQ(SetupJobOn(w, "job-2", 0, 1).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace tessera

// WatchJob through a real gRPC server in this process: a thousand open
// watch streams hold no server threads (the process gains far fewer threads
// than streams) while heartbeats and job calls keep answering; every stream
// replays the job's history, receives the live cancel and ends OK when the
// job ends; the stream limit answers RESOURCE_EXHAUSTED and frees its slot
// when a client goes away; bad requests get NOT_FOUND and INVALID_ARGUMENT;
// after_sequence resumes after the events a client already has.
#include <dirent.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera/v1/coordinator.grpc.pb.h"
#include "proto/tessera/v1/worker.grpc.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/fake_worker_connection.h"
#include "server/tiny_job_spec_for_test.h"

namespace tessera {
namespace {

int ThreadsOfThisProcess() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

std::unique_ptr<grpc::ClientContext> Deadline(absl::Duration d) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
  return ctx;
}

// Many server-streaming WatchJob calls on one completion queue, driven by
// one thread: each stream reads until the server finishes it.
class AsyncWatchers {
 public:
  explicit AsyncWatchers(v1::Coordinator::Stub* stub) : stub_(stub) {
    poller_ = std::thread([this] { Poll(); });
  }
  ~AsyncWatchers() {
    for (auto& s : streams_) s->ctx.TryCancel();
    // Every stream must have finished before the queue shuts down: the
    // poller still starts a Finish on each cancelled stream.
    EXPECT_TRUE(WaitFinished(static_cast<int>(streams_.size()), absl::Seconds(30)));
    cq_.Shutdown();
    poller_.join();
  }

  void Open(int count, const v1::WatchJobRequest& req) {
    for (int i = 0; i < count; ++i) {
      auto s = std::make_unique<Stream>();
      s->reader = stub_->PrepareAsyncWatchJob(&s->ctx, req, &cq_);
      s->reader->StartCall(Tag(s.get(), kStarted));
      streams_.push_back(std::move(s));
    }
  }
  void Cancel(int i) { streams_[i]->ctx.TryCancel(); }

  int Finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  bool WaitFinished(int count, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // After the stream finished: its status and every event it read.
  const grpc::Status& status(int i) const { return streams_[i]->status; }
  const std::vector<v1::JobEvent>& events(int i) const { return streams_[i]->events; }
  size_t size() const { return streams_.size(); }

 private:
  enum Step { kStarted, kRead, kFinished };
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<v1::JobEvent>> reader;
    v1::JobEvent event;
    std::vector<v1::JobEvent> events;
    grpc::Status status;
  };
  static void* Tag(Stream* s, Step step) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(s) | step);
  }

  void Poll() {
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
      auto* s = reinterpret_cast<Stream*>(reinterpret_cast<uintptr_t>(tag) & ~uintptr_t{3});
      const Step step = static_cast<Step>(reinterpret_cast<uintptr_t>(tag) & 3);
      if (step == kFinished) {
        absl::MutexLock lock(&mu_);
        ++finished_;
        continue;
      }
      if (step == kRead && ok) s->events.push_back(s->event);
      if (ok) {
        s->reader->Read(&s->event, Tag(s, kRead));
      } else {
        s->reader->Finish(&s->status, Tag(s, kFinished));
      }
    }
  }

  v1::Coordinator::Stub* stub_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::thread poller_;
  absl::Mutex mu_;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

class JobWatchTest : public ::testing::Test {
 protected:
  void StartServer(int max_watch_streams) {
    CoordinatorOptions options;
    options.start_background_thread = false;
    options.connect = FakeWorkerConnector();
    core_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(core_->Start().ok());
    service_ = std::make_unique<CoordinatorService>(core_.get(), nullptr, max_watch_streams);
    registry_ = std::make_unique<WorkerRegistryService>(core_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    builder.RegisterService(registry_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Coordinator::NewStub(channel_);
    registry_stub_ = v1::WorkerRegistry::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (core_) core_->Shutdown();
  }

  std::string Submit() {
    absl::StatusOr<v1::Job> job = core_->SubmitJob(TinyJobSpec(1, 5));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }
  bool WaitOpen(int count, absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time end = absl::Now() + timeout;
    while (service_->open_watch_streams() != count) {
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }
  // A blocking watch that must be refused: its final status.
  grpc::Status RefusedWatch(const v1::WatchJobRequest& req) {
    auto ctx = Deadline(absl::Seconds(10));
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(ctx.get(), req);
    v1::JobEvent event;
    while (reader->Read(&event)) ADD_FAILURE() << "a refused watch sent " << event.ShortDebugString();
    return reader->Finish();
  }

  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<WorkerRegistryService> registry_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<v1::WorkerRegistry::Stub> registry_stub_;
};

bool IsCancelledState(const v1::JobEvent& e) {
  return e.has_state_change() && e.state_change().state() == v1::CANCELLED;
}

// The failure this guards against: with a thread per stream, 1000 watchers
// on a 2-core host starved the heartbeats, and the running job failed with
// "no heartbeat".
TEST_F(JobWatchTest, AThousandWatchersHoldNoThreadsAndLivenessCallsStillAnswer) {
  StartServer(kDefaultMaxWatchStreams);
  const std::string id = Submit();
  v1::RegisterWorkerRequest reg;
  reg.set_address("127.0.0.1:1");
  reg.mutable_device()->set_kind(v1::CPU);
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(registry_stub_->RegisterWorker(Deadline(absl::Seconds(10)).get(), reg, &registered).ok());

  // Warm the server's thread pools with a few calls first, so the count
  // below measures what the streams add.
  for (int i = 0; i < 4; ++i) {
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::Job job;
    ASSERT_TRUE(stub_->GetJob(Deadline(absl::Seconds(10)).get(), get, &job).ok());
  }
  const int threads_before = ThreadsOfThisProcess();
  constexpr int kWatchers = 1000;
  AsyncWatchers watchers(stub_.get());
  v1::WatchJobRequest req;
  req.set_job_id(id);
  watchers.Open(kWatchers, req);
  ASSERT_TRUE(WaitOpen(kWatchers)) << service_->open_watch_streams() << " open";
  const int threads_with_watchers = ThreadsOfThisProcess();
  // A thread per stream would add 1000; gRPC's own executor may add a few
  // dozen on a loaded host.
  EXPECT_LT(threads_with_watchers - threads_before, 200)
      << threads_before << " threads before, " << threads_with_watchers << " with " << kWatchers
      << " watch streams open";

  // Liveness and job calls answer promptly while every stream is open.
  for (int i = 0; i < 20; ++i) {
    v1::HeartbeatRequest beat;
    beat.set_worker_id(registered.worker_id());
    beat.set_address(reg.address());
    v1::HeartbeatResponse beat_resp;
    const absl::Time start = absl::Now();
    const grpc::Status s =
        registry_stub_->Heartbeat(Deadline(absl::Seconds(2)).get(), beat, &beat_resp);
    ASSERT_TRUE(s.ok()) << "heartbeat " << i << ": " << s.error_message();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "heartbeat " << i;
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::Job job;
    ASSERT_TRUE(stub_->GetJob(Deadline(absl::Seconds(2)).get(), get, &job).ok());
  }

  // The cancel reaches every stream live, and each ends OK after it.
  ASSERT_TRUE(core_->CancelJob(id, "test").ok());
  ASSERT_TRUE(watchers.WaitFinished(kWatchers, absl::Seconds(60))) << watchers.Finished();
  for (size_t i = 0; i < watchers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(watchers.status(i).ok()) << watchers.status(i).error_message();
    ASSERT_FALSE(watchers.events(i).empty());
    EXPECT_TRUE(IsCancelledState(watchers.events(i).back()))
        << watchers.events(i).back().ShortDebugString();
    for (size_t k = 1; k < watchers.events(i).size(); ++k) {
      EXPECT_LT(watchers.events(i)[k - 1].sequence(), watchers.events(i)[k].sequence());
    }
  }
  EXPECT_TRUE(WaitOpen(0));
}

TEST_F(JobWatchTest, TheStreamLimitRefusesWithResourceExhaustedAndFreesOnDisconnect) {
  StartServer(3);
  const std::string id = Submit();
  AsyncWatchers watchers(stub_.get());
  v1::WatchJobRequest req;
  req.set_job_id(id);
  watchers.Open(3, req);
  ASSERT_TRUE(WaitOpen(3));
  const grpc::Status refused = RefusedWatch(req);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_watch_streams"))
      << refused.error_message();
  EXPECT_EQ(service_->open_watch_streams(), 3);

  watchers.Cancel(0);  // a client that goes away gives its slot back
  ASSERT_TRUE(watchers.WaitFinished(1, absl::Seconds(10)));
  EXPECT_EQ(watchers.status(0).error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(WaitOpen(2));
  watchers.Open(1, req);
  EXPECT_TRUE(WaitOpen(3));
}

TEST_F(JobWatchTest, BadRequestsAreRefusedWithoutTakingASlot) {
  StartServer(kDefaultMaxWatchStreams);
  const std::string id = Submit();
  v1::WatchJobRequest unknown;
  unknown.set_job_id("job-999");
  EXPECT_EQ(RefusedWatch(unknown).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::WatchJobRequest negative;
  negative.set_job_id(id);
  negative.set_after_sequence(-1);
  const grpc::Status s = RefusedWatch(negative);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "after_sequence")) << s.error_message();
  EXPECT_EQ(service_->open_watch_streams(), 0);
}

TEST_F(JobWatchTest, AfterSequenceResumesAfterTheEventsAClientHas) {
  StartServer(kDefaultMaxWatchStreams);
  const std::string id = Submit();
  ASSERT_TRUE(core_->CancelJob(id, "test").ok());  // the log is closed: a finite history
  v1::WatchJobRequest all;
  all.set_job_id(id);
  std::vector<v1::JobEvent> history;
  {
    auto ctx = Deadline(absl::Seconds(10));
    auto reader = stub_->WatchJob(ctx.get(), all);
    v1::JobEvent e;
    while (reader->Read(&e)) history.push_back(e);
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_GE(history.size(), 2u);
  v1::WatchJobRequest rest = all;
  rest.set_after_sequence(history[0].sequence());
  std::vector<v1::JobEvent> resumed;
  auto ctx = Deadline(absl::Seconds(10));
  auto reader = stub_->WatchJob(ctx.get(), rest);
  v1::JobEvent e;
  while (reader->Read(&e)) resumed.push_back(e);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(resumed.size(), history.size() - 1);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].sequence(), history[i + 1].sequence());
  }
}

}  // namespace
}  // namespace tessera

// The trainer must not trust a step whose collectives were queued and then
// failed. NCCL collectives return as soon as they are queued; a lost peer or
// a timeout is reported later through Communicator::FirstFailure(). Here a
// two-rank job runs over a stand-in communicator whose collectives always
// "succeed" when called (copies within this rank's memory) but which can be
// told that one of them later failed: the step (and InitCollective) must
// then come back ABORTED with that failure's message, not a loss.
#include <cstring>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

constexpr int kWorld = 2;

// Rank 0 of a pretend group of two on the CPU engine: all-gather writes this
// rank's bytes into every rank's slot, reduce-scatter keeps slot 0, and
// all-reduce leaves the buffer as it is. Only the failure reporting matters.
class LateFailingCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return kWorld; }
  absl::Status AllGather(const void* send, void* recv, size_t bytes_per_rank, Stream*) override {
    for (int r = 0; r < kWorld; ++r) {
      std::memmove(static_cast<char*>(recv) + r * bytes_per_rank, send, bytes_per_rank);
    }
    return Called();
  }
  absl::Status ReduceScatter(const TensorDesc& send, const TensorDesc& recv, Stream*) override {
    std::memmove(recv.data, send.data, recv.Bytes());
    return Called();
  }
  absl::Status AllReduce(const TensorDesc&, ReduceOp, Stream*) override { return Called(); }
  void Abort() override {}
  absl::Status FirstFailure() override {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // From now on, FirstFailure() reports that a queued collective failed.
  void FailLater() {
    absl::MutexLock lock(&mu_);
    failure_ = absl::AbortedError("reduce-scatter on rank 0 timed out after 3s; a peer is lost");
  }
  int calls() const { return calls_; }

 private:
  absl::Status Called() {
    ++calls_;
    return absl::OkStatus();  // queued: a failure would only show up later
  }
  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int calls_ = 0;
};

// A factory that builds the stand-in and leaves a pointer to it in *built
// (owned by the trainer); with fail_at_once, the group reports a failure
// from the start, as a peer lost during the setup all-reduce would.
CommunicatorFactory StandInFactory(LateFailingCommunicator** built, bool fail_at_once) {
  return [built, fail_at_once](RendezvousStore*, int, int, const std::string&, absl::Duration)
             -> absl::StatusOr<std::unique_ptr<Communicator>> {
    auto comm = std::make_unique<LateFailingCommunicator>();
    if (fail_at_once) comm->FailLater();
    *built = comm.get();
    return std::unique_ptr<Communicator>(std::move(comm));
  };
}

TEST(QueuedCollectiveFailure, StepWhoseCollectiveFailedLaterIsAborted) {
  LateFailingCommunicator* comm = nullptr;
  FsdpTrainer trainer(CreateCpuOps(), StandInFactory(&comm, /*fail_at_once=*/false));
  ASSERT_TRUE(trainer.Setup(TinyCpuTestJobSpec(1), 0, kWorld).ok());
  ASSERT_TRUE(trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5)).ok());
  ASSERT_NE(comm, nullptr);
  absl::StatusOr<StepReport> first = trainer.RunStep(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(comm->calls(), 0);

  comm->FailLater();
  absl::StatusOr<StepReport> second = trainer.RunStep(1);
  ASSERT_FALSE(second.ok()) << "a step whose collective failed reported loss " << second->loss;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(second.status().message().find("timed out"), absl::string_view::npos)
      << second.status();
}

TEST(QueuedCollectiveFailure, InitCollectiveChecksItsQueuedAllReduce) {
  LateFailingCommunicator* comm = nullptr;
  FsdpTrainer trainer(CreateCpuOps(), StandInFactory(&comm, /*fail_at_once=*/true));
  ASSERT_TRUE(trainer.Setup(TinyCpuTestJobSpec(1), 0, kWorld).ok());
  const absl::Status s = trainer.InitCollective(nullptr, "127.0.0.1", absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(comm, nullptr);
}

}  // namespace
}  // namespace tessera

// The deferring double runs each Start* collective no earlier than a queued
// engine may: at the WaitFor that names it or a later one, or before a
// blocking collective, and always in issue order.
#include "worker/comm/deferred_communicator_for_test.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Records which collectives ran, in order; each finishes when called.
class RecordingCommunicator : public Communicator {
 public:
  explicit RecordingCommunicator(std::vector<std::string>* log) : log_(log) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllGather(const void*, void*, size_t bytes, Stream*) override {
    log_->push_back("gather " + std::to_string(bytes));
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(const TensorDesc&, const TensorDesc&, Stream*) override {
    log_->push_back("reduce-scatter");
    return absl::OkStatus();
  }
  absl::Status AllReduce(const TensorDesc&, ReduceOp, Stream*) override {
    log_->push_back("all-reduce");
    return absl::OkStatus();
  }
  void Abort() override {}
  absl::Status FirstFailure() override { return absl::OkStatus(); }

 private:
  std::vector<std::string>* log_;
};

TEST(DeferredCommunicator, RunsCollectivesOnlyWhenWaitedForAndInIssueOrder) {
  std::vector<std::string> log;
  DeferredCommunicator comm(std::make_unique<RecordingCommunicator>(&log));
  const AllGatherPart first{nullptr, nullptr, 1}, second{nullptr, nullptr, 2};
  absl::StatusOr<CollectiveTicket> a = comm.StartAllGather({&first, 1}, nullptr);
  absl::StatusOr<CollectiveTicket> b = comm.StartAllGather({&second, 1}, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->queued);
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(comm.pending(), 2);
  ASSERT_TRUE(comm.WaitFor(*a, nullptr).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"gather 1"}));
  ASSERT_TRUE(comm.WaitFor(*a, nullptr).ok());  // waiting twice runs nothing more
  EXPECT_EQ(log.size(), 1u);

  const ReduceScatterPart part;
  absl::StatusOr<CollectiveTicket> c = comm.StartReduceScatter({&part, 1}, nullptr);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(comm.WaitFor(*c, nullptr).ok());  // runs b before c
  EXPECT_EQ(log, (std::vector<std::string>{"gather 1", "gather 2", "reduce-scatter"}));

  // A blocking collective runs after everything issued before it.
  ASSERT_TRUE(comm.StartAllGather({&first, 1}, nullptr).ok());
  ASSERT_TRUE(comm.AllReduce(TensorDesc{}, ReduceOp::kSum, nullptr).ok());
  EXPECT_EQ(log.back(), "all-reduce");
  EXPECT_EQ(log[log.size() - 2], "gather 1");
  EXPECT_EQ(comm.pending(), 0);
}

}  // namespace
}  // namespace tessera

// The one-rank communicator on the CPU engine: collectives are copies or
// nothing, mismatched reduce-scatter buffers are refused, and Abort turns
// later collectives into ABORTED like a real group.
#include "worker/comm/single_rank_communicator.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/cpu_ops.h"

namespace tessera {
namespace {

TensorDesc Floats(std::vector<float>& v) {
  TensorDesc d;
  d.data = v.data();
  d.dtype = DType::kFloat32;
  d.shape = Shape{static_cast<int64_t>(v.size())};
  return d;
}

TEST(SingleRankCommunicatorTest, CollectivesAreTheIdentity) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  SingleRankCommunicator comm(*ops);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);

  std::vector<uint8_t> shard = {1, 2, 3, 4, 5}, gathered(5, 0);
  ASSERT_TRUE(comm.AllGather(shard.data(), gathered.data(), shard.size(), nullptr).ok());
  EXPECT_EQ(gathered, shard);
  ASSERT_TRUE(comm.AllGather(shard.data(), shard.data(), shard.size(), nullptr).ok());  // in place
  EXPECT_EQ(shard, (std::vector<uint8_t>{1, 2, 3, 4, 5}));

  std::vector<float> full = {0.5f, -1.f, 3.25f}, own(3, 0.f);
  ASSERT_TRUE(comm.ReduceScatter(Floats(full), Floats(own), nullptr).ok());
  EXPECT_EQ(own, full);

  std::vector<float> amax = {2.f, 7.f};
  ASSERT_TRUE(comm.AllReduce(Floats(amax), ReduceOp::kMax, nullptr).ok());
  ASSERT_TRUE(comm.AllReduce(Floats(amax), ReduceOp::kSum, nullptr).ok());
  EXPECT_EQ(amax, (std::vector<float>{2.f, 7.f}));
}

TEST(SingleRankCommunicatorTest, MismatchedReduceScatterIsRefused) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  SingleRankCommunicator comm(*ops);
  std::vector<float> full(4, 1.f), own(3, 0.f);
  EXPECT_EQ(comm.ReduceScatter(Floats(full), Floats(own), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(own, (std::vector<float>(3, 0.f)));  // nothing written
}

TEST(SingleRankCommunicatorTest, AbortMakesLaterCollectivesAborted) {
  std::unique_ptr<Ops> ops = CreateCpuOps();
  SingleRankCommunicator comm(*ops);
  EXPECT_TRUE(comm.FirstFailure().ok());
  comm.Abort();
  EXPECT_EQ(comm.FirstFailure().code(), absl::StatusCode::kAborted);
  std::vector<float> v(2, 1.f), w(2, 0.f);
  EXPECT_EQ(comm.AllReduce(Floats(v), ReduceOp::kSum, nullptr).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comm.ReduceScatter(Floats(v), Floats(w), nullptr).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comm.AllGather(v.data(), w.data(), 8, nullptr).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace tessera

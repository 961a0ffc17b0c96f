// Engine-level behaviour of CudaOps that no single op test covers (needs a
// GPU, tag "gpu"): device discovery, out-of-memory as RESOURCE_EXHAUSTED
// without poisoning later launches, argument validation before any launch,
// and use from a second thread (the per-thread device selection).
#include "worker/engine/cuda/cuda_ops.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

TEST(CudaOpsDeviceTest, DescribesDevicesAndRejectsMissingOnes) {
  auto info = DescribeCudaDevice(0);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->name().empty());
  EXPECT_GT(info->memory_bytes(), int64_t{1} << 30);
  EXPECT_EQ(DescribeCudaDevice(999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CreateCudaOps(999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CreateCudaOps(-1).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CpuVsCudaTest, OutOfMemoryIsResourceExhaustedAndLeavesNoStaleError) {
  auto huge = gpu().Allocate(size_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  // The next op's launch check must not report the failed allocation.
  std::vector<HostTensor> t = {RandomTensor(DType::kFloat32, Shape{100}, 1),
                               Poisoned(DType::kBFloat16, Shape{100})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Cast(d[0], d[1], nullptr);
  });
  EXPECT_EQ(g[1].bytes, c[1].bytes);
}

TEST_F(CpuVsCudaTest, BadArgumentsAreRejectedBeforeAnyLaunch) {
  std::vector<HostTensor> t = {RandomTensor(DType::kFloat32, Shape{4, 8}, 1),
                               Poisoned(DType::kE4M3, Shape{4, 8}), Scalar(1.f),
                               Poisoned(DType::kFloat32, Shape{4})};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    TensorDesc no_scale = d[1];
    EXPECT_EQ(ops.Quantize(d[0], no_scale, nullptr).code(), absl::StatusCode::kInvalidArgument);
    TensorDesc wrong_count = d[1];
    wrong_count.scale = d[2].As<float>();
    wrong_count.shape = Shape{4, 7};
    EXPECT_EQ(ops.Quantize(d[0], wrong_count, nullptr).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ops.RmsNormForward(d[0], d[3], 1e-5f, d[0], d[3], nullptr).code(),
              absl::StatusCode::kInvalidArgument);  // weight [4] for H = 8
    EXPECT_EQ(ops.Cast(d[0], d[3], nullptr).code(), absl::StatusCode::kInvalidArgument);
    return absl::OkStatus();
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[1].bytes, t[1].bytes) << "a rejected op wrote its output";
}

TEST_F(CpuVsCudaTest, WorksFromAnotherThread) {
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{64}, 1),
                               RandomTensor(DType::kBFloat16, Shape{64}, 2),
                               Poisoned(DType::kFloat32, Shape{64})};
  absl::StatusOr<std::vector<HostTensor>> g;
  std::thread worker([&] {
    g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
      return ops.Add(d[0], d[1], d[2], nullptr);
    });
  });
  worker.join();
  ASSERT_TRUE(g.ok()) << g.status();
  auto c = RunOn(cpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Add(d[0], d[1], d[2], nullptr);
  });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*g)[2].bytes, (*c)[2].bytes);
}

}  // namespace
}  // namespace testing
}  // namespace tessera

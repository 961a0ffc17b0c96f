// Engine-level behaviour of CudaOps that no single op test covers (needs a
// GPU, tag "gpu"): device discovery, out-of-memory as RESOURCE_EXHAUSTED
// without poisoning later launches, argument validation before any launch,
// use from a second thread (the per-thread device selection), and captured
// work (CUDA graphs) on an engine stream. The scratch-buffer cases are in
// scratch_buffer_gpu_test.cc.
#include "worker/engine/cuda/cuda_ops.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/status_macros.h"
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

// Work captured on an engine stream runs only when replayed, reads the
// memory it was captured with as it is at each replay, and stays ordered
// with the default stream the harness copies results back on.
TEST_F(CpuVsCudaTest, CapturedWorkRunsWhenReplayedOnCurrentInputs) {
  auto stream = gpu().CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_NE(*stream, nullptr);
  Stream* s = *stream;
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{1000}, 1),
                               RandomTensor(DType::kBFloat16, Shape{1000}, 2),
                               Poisoned(DType::kFloat32, Shape{1000}),   // a + b, replay 2
                               RandomTensor(DType::kBFloat16, Shape{1000}, 3),  // next a
                               Poisoned(DType::kFloat32, Shape{1000}),   // a + b, replay 1
                               Poisoned(DType::kFloat32, Shape{1000})};  // out before replay
  auto g = RunOn(gpu(), t, [s](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    RETURN_IF_ERROR(ops.BeginCapture(s));
    RETURN_IF_ERROR(ops.Add(d[0], d[1], d[2], s));
    ASSIGN_OR_RETURN(std::unique_ptr<Ops::CapturedWork> work, ops.EndCapture(s));
    RETURN_IF_ERROR(ops.CopyDeviceToDevice(d[5].data, d[2].data, d[2].Bytes(), s));
    RETURN_IF_ERROR(ops.Replay(*work, s));
    RETURN_IF_ERROR(ops.CopyDeviceToDevice(d[4].data, d[2].data, d[2].Bytes(), s));
    RETURN_IF_ERROR(ops.CopyDeviceToDevice(d[0].data, d[3].data, d[0].Bytes(), s));
    RETURN_IF_ERROR(ops.Replay(*work, s));
    return absl::OkStatus();  // no synchronize: the copy-back on the default stream waits
  });
  ASSERT_TRUE(g.ok()) << g.status();
  auto c = RunOn(cpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    RETURN_IF_ERROR(ops.Add(d[0], d[1], d[4], nullptr));
    return ops.Add(d[3], d[1], d[2], nullptr);
  });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*g)[5].bytes, t[5].bytes) << "capturing ran the work";
  EXPECT_EQ((*g)[4].bytes, (*c)[4].bytes) << "first replay";
  EXPECT_EQ((*g)[2].bytes, (*c)[2].bytes) << "second replay, on the new input";
}

TEST_F(CpuVsCudaTest, CaptureMisuseIsAnErrorAndLeavesTheEngineUsable) {
  auto stream = gpu().CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  Stream* s = *stream;
  EXPECT_EQ(gpu().BeginCapture(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu().EndCapture(s).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<HostTensor> t = {RandomTensor(DType::kFloat32, Shape{64}, 1),
                               Poisoned(DType::kBFloat16, Shape{64})};
  auto g = RunOn(gpu(), t, [s](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    // A read back to the host cannot be captured: it fails, and so does the capture.
    RETURN_IF_ERROR(ops.BeginCapture(s));
    float host[64];
    EXPECT_FALSE(ops.CopyToHost(host, d[0].data, sizeof(host), s).ok());
    EXPECT_EQ(ops.EndCapture(s).status().code(), absl::StatusCode::kFailedPrecondition);
    // The stream and the engine work as before.
    RETURN_IF_ERROR(ops.Cast(d[0], d[1], s));
    return ops.Synchronize(s);
  });
  ASSERT_TRUE(g.ok()) << g.status();
  auto c = RunOn(cpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.Cast(d[0], d[1], nullptr);
  });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*g)[1].bytes, (*c)[1].bytes);
}

}  // namespace
}  // namespace testing
}  // namespace tessera

// Engine-level behaviour of CudaOps that no single op test covers (needs a
// GPU, tag "gpu"): device discovery, out-of-memory as RESOURCE_EXHAUSTED
// without poisoning later launches, argument validation before any launch,
// use from a second thread (the per-thread device selection), and captured
// work (CUDA graphs) on an engine stream, including a capture whose scratch
// buffer the engine later outgrows.
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

// A scratch buffer that fails to grow (out of memory for one huge call)
// must not leave the engine handing out a null buffer to the next, smaller
// call: it used to keep the old size with no memory behind it.
TEST(CudaScratchTest, AFailedGrowthLeavesTheNextSmallerCallWorking) {
  auto engine = CreateCudaOps(0);  // its own scratch buffers
  ASSERT_TRUE(engine.ok()) << engine.status();
  Ops& ops = **engine;
  constexpr int kH = 16, kSmall = 64, kSmallVocab = 512;
  constexpr int64_t kHugeTokens = int64_t{1} << 20, kHugeVocab = int64_t{1} << 19;  // 1 TiB chunk
  // 0 x, 1 weight, 2 targets; 3..6 first run, 7..10 after the failure; 11..17 the huge call.
  std::vector<HostTensor> t = {
      RandomTensor(DType::kBFloat16, Shape{kSmall, kH}, 1),
      RandomTensor(DType::kBFloat16, Shape{kSmallVocab, kH}, 2, 0.3f),
      HostTensor::FromVector(DType::kInt32, Shape{kSmall}, RandomInts(kSmall, 3, 0, kSmallVocab)),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kSmall, kH}),
      Poisoned(DType::kFloat32, Shape{kSmallVocab, kH}),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kSmall, kH}),
      Poisoned(DType::kFloat32, Shape{kSmallVocab, kH}),
      RandomTensor(DType::kBFloat16, Shape{kHugeTokens, kH}, 4),
      RandomTensor(DType::kBFloat16, Shape{kHugeVocab, kH}, 5),
      HostTensor::FromVector(DType::kInt32, Shape{kHugeTokens},
                             std::vector<int32_t>(kHugeTokens, 1)),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kHugeTokens, kH}),
      Poisoned(DType::kFloat32, Shape{kHugeVocab, kH})};
  auto g = RunOn(ops, t, [](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    auto loss = [&](int x, int weight, int targets, int first, int64_t chunk) {
      return ops.FusedLinearCrossEntropy(d[x], d[weight], d[targets], -100, chunk,
                                         d[first].As<float>(), d[first + 1].As<float>(),
                                         d[first + 2], d[first + 3],
                                         /*accumulate_grad_weight=*/false, nullptr);
    };
    RETURN_IF_ERROR(loss(0, 1, 2, 3, kSmall));
    const absl::Status huge = loss(11, 12, 13, 14, kHugeTokens);
    EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
    RETURN_IF_ERROR(loss(0, 1, 2, 7, kSmall));
    return ops.Synchronize(nullptr);
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[8].bytes, (*g)[4].bytes) << "valid tokens";
  EXPECT_EQ((*g)[9].bytes, (*g)[5].bytes) << "grad_x";
  EXPECT_EQ((*g)[10].bytes, (*g)[6].bytes) << "grad_weight";
}

// A captured graph keeps pointing at the engine's scratch buffers. When a
// later, larger call outgrows one (here the fused loss's logits chunk), the
// old buffer must outlive the graph instead of being freed under it: the
// replay must give the queued call's results and must not write into
// memory allocated after the capture.
TEST(CudaCaptureTest, ReplaysAfterTheEngineOutgrowsAScratchBufferTheCaptureUses) {
  auto engine = CreateCudaOps(0);  // its own scratch buffers, empty at the start
  ASSERT_TRUE(engine.ok()) << engine.status();
  Ops& ops = **engine;
  auto stream = ops.CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  Stream* s = *stream;
  // A 4 MiB logits chunk, then a 16 MiB one: allocations this large get
  // their own mapping, which cudaFree takes away, so a replay into a freed
  // chunk faults instead of passing by luck.
  constexpr int kSmall = 64, kLarge = 256, kH = 64, kVocab = 32768;
  std::vector<int32_t> targets = RandomInts(kLarge, 7, 0, kVocab);
  std::vector<int32_t> small_targets(targets.begin(), targets.begin() + kSmall);
  // 0 x, 1 weight, 2 targets; small run: 3..6 queued, 7..10 replayed; 11..15 the large run.
  std::vector<HostTensor> t = {
      RandomTensor(DType::kBFloat16, Shape{kSmall, kH}, 1),
      RandomTensor(DType::kBFloat16, Shape{kVocab, kH}, 2, 0.3f),
      HostTensor::FromVector(DType::kInt32, Shape{kSmall}, small_targets),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kSmall, kH}),
      Poisoned(DType::kFloat32, Shape{kVocab, kH}),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kSmall, kH}),
      Poisoned(DType::kFloat32, Shape{kVocab, kH}),
      RandomTensor(DType::kBFloat16, Shape{kLarge, kH}, 3),
      HostTensor::FromVector(DType::kInt32, Shape{kLarge}, targets),
      Scalar(0.f), Scalar(0.f), Poisoned(DType::kBFloat16, Shape{kLarge, kH}),
      Poisoned(DType::kFloat32, Shape{kVocab, kH})};
  auto g = RunOn(ops, t, [s](Ops& ops, std::vector<TensorDesc>& d) -> absl::Status {
    auto loss = [&](int x, int targets, int first, int chunk) {
      return ops.FusedLinearCrossEntropy(d[x], d[1], d[targets], -100, chunk,
                                         d[first].As<float>(), d[first + 1].As<float>(),
                                         d[first + 2], d[first + 3],
                                         /*accumulate_grad_weight=*/false, s);
    };
    RETURN_IF_ERROR(loss(0, 2, 3, kSmall));  // queued: sizes the logits chunk for 64 rows
    RETURN_IF_ERROR(ops.BeginCapture(s));
    RETURN_IF_ERROR(loss(0, 2, 7, kSmall));
    ASSIGN_OR_RETURN(std::unique_ptr<Ops::CapturedWork> work, ops.EndCapture(s));
    RETURN_IF_ERROR(loss(11, 12, 13, kLarge));  // needs a 4x larger logits chunk
    // Had the engine freed the smaller chunk, new allocations of its size
    // would likely get its address back, and the replay would write into them.
    constexpr size_t kChunkBytes = size_t{kSmall} * kVocab * 2;
    std::vector<std::unique_ptr<Buffer>> bystanders;
    for (int i = 0; i < 8; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Buffer> b, ops.Allocate(kChunkBytes));
      RETURN_IF_ERROR(ops.Memset(b->data(), 0x5A, kChunkBytes, s));
      bystanders.push_back(std::move(b));
    }
    RETURN_IF_ERROR(ops.Replay(*work, s));
    RETURN_IF_ERROR(ops.Synchronize(s));
    std::vector<uint8_t> host(kChunkBytes);
    for (const auto& b : bystanders) {
      RETURN_IF_ERROR(ops.CopyToHost(host.data(), b->data(), kChunkBytes, s));
      EXPECT_EQ(std::count(host.begin(), host.end(), uint8_t{0x5A}),
                static_cast<std::ptrdiff_t>(kChunkBytes))
          << "the replay wrote into memory allocated after the capture";
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR((*g)[7].As<float>()[0], (*g)[3].As<float>()[0], 1e-5f * (*g)[3].As<float>()[0]);
  EXPECT_EQ((*g)[8].bytes, (*g)[4].bytes) << "valid tokens";
  EXPECT_EQ((*g)[9].bytes, (*g)[5].bytes) << "grad_x";
  EXPECT_EQ((*g)[10].bytes, (*g)[6].bytes) << "grad_weight";
  EXPECT_EQ((*g)[14].As<float>()[0], static_cast<float>(kLarge)) << "the large run ran";
}

}  // namespace
}  // namespace testing
}  // namespace tessera

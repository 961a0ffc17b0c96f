// The scratch-buffer rule (scratch_buffer.h) on a real engine (needs a GPU,
// tag "gpu"): a scratch buffer that fails to grow leaves the next, smaller
// call working; and a captured graph keeps working after the engine
// outgrows a scratch buffer the capture uses, without writing into memory
// allocated after it. scratch_buffer_test.cc checks the same rule without a
// device.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "worker/engine/cuda/cuda_ops.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

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

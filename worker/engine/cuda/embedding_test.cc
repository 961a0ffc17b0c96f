// Token embedding on the GPU against the CPU reference (needs a GPU, tag
// "gpu"). Tolerances: forward bit-exact (a gather and at most one rounding);
// backward 1e-6 relative (fp32 atomics add the same terms in another order).
// Also: an out-of-range id writes a zero row and makes the next Synchronize
// INVALID_ARGUMENT, once.
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<DType /*table*/, DType /*out*/, std::tuple<int, int, int> /*T, V, H*/>;

class EmbeddingTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchCpu) {
  const auto [table_dtype, out_dtype, dims] = GetParam();
  const auto [tokens, vocab, h] = dims;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, RandomInts(tokens, 7, 0, vocab)),
      RandomTensor(table_dtype, Shape{vocab, h}, 1), Poisoned(out_dtype, Shape{tokens, h}),
      RandomTensor(out_dtype, Shape{tokens, h}, 2),       // grad_out
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 3)};  // grad_table, accumulated into
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
    if (s.ok()) s = ops.EmbeddingBackward(d[0], d[3], d[4], nullptr);
    return s;
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0) << "forward";
  EXPECT_LT(Error(g[4], c[4]), 1e-6) << "backward";
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, EmbeddingTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(std::tuple{1, 1, 8}, std::tuple{300, 7, 96},
                                         std::tuple{64, 1000, 130}, std::tuple{0, 5, 16})));

TEST_F(CpuVsCudaTest, OutOfRangeIdRaisesTheFlagOnce) {
  const int tokens = 4, vocab = 6, h = 40;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, vocab, 2, -1}),
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 1), Poisoned(DType::kFloat32, Shape{tokens, h})};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  // The flag was cleared by the report: a clean run succeeds and writes
  // zeros for nothing.
  t[0] = HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{1, 5, 2, 0});
  auto clean = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.EmbeddingForward(d[0], d[1], d[2], nullptr);
  });
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ((*clean)[2].As<float>()[h * 3], t[1].As<float>()[0]);
}

TEST_F(CpuVsCudaTest, OutOfRangeIdWritesAZeroRow) {
  const int tokens = 3, vocab = 4, h = 8;
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kInt32, Shape{tokens}, std::vector<int32_t>{0, 9, 3}),
      RandomTensor(DType::kFloat32, Shape{vocab, h}, 1), Poisoned(DType::kFloat32, Shape{tokens, h}),
      Poisoned(DType::kFloat32, Shape{tokens, h})};
  Ops& ops = gpu();
  auto out = ops.Allocate(t[2].bytes.size());
  auto ids = ops.Allocate(t[0].bytes.size());
  auto table = ops.Allocate(t[1].bytes.size());
  ASSERT_TRUE(out.ok() && ids.ok() && table.ok());
  ASSERT_TRUE(ops.CopyToDevice((*ids)->data(), t[0].bytes.data(), t[0].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*table)->data(), t[1].bytes.data(), t[1].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.CopyToDevice((*out)->data(), t[2].bytes.data(), t[2].bytes.size(), nullptr).ok());
  ASSERT_TRUE(ops.EmbeddingForward(MakeTensor((*ids)->data(), DType::kInt32, Shape{tokens}),
                                   MakeTensor((*table)->data(), DType::kFloat32, Shape{vocab, h}),
                                   MakeTensor((*out)->data(), DType::kFloat32, Shape{tokens, h}),
                                   nullptr)
                  .ok());
  EXPECT_EQ(ops.Synchronize(nullptr).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> got(tokens * h);
  ASSERT_TRUE(ops.CopyToHost(got.data(), (*out)->data(), got.size() * 4, nullptr).ok());
  const std::vector<float> table_values = t[1].As<float>();
  for (int j = 0; j < h; ++j) {
    EXPECT_EQ(got[j], table_values[j]);
    EXPECT_EQ(got[h + j], 0.f) << "bad id row";
    EXPECT_EQ(got[2 * h + j], table_values[3 * h + j]);
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera

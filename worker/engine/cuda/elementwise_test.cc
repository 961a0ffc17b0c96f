// Add and Cast on the GPU against the CPU reference (needs a GPU, tag
// "gpu"). Tolerance: none. Both are one fp32 operation and one rounding
// (round to nearest even into bf16), which the GPU reproduces bit for bit.
// Every dtype combination runs on buffers from Allocate (16-byte aligned:
// the vectorized fast path, with a tail when n % 8 != 0) and on views one
// element into their buffers (the general kernels).
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<DType, DType, DType, int64_t>;  // a, b, out, n

class ElementwiseTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(ElementwiseTest, AddAndCastAreBitExact) {
  const auto [da, db, dout, n] = GetParam();
  std::vector<HostTensor> t = {RandomTensor(da, Shape{n}, 1, 4.f), RandomTensor(db, Shape{n}, 2, 4.f),
                               Poisoned(dout, Shape{n}), Poisoned(dout, Shape{n}),
                               RandomTensor(da, Shape{n}, 3)};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.Add(d[0], d[1], d[2], nullptr);
    if (s.ok()) s = ops.Cast(d[0], d[3], nullptr);
    if (s.ok()) s = ops.Add(d[4], d[1], d[4], nullptr);  // out aliases a
    return s;
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0) << "add";
  EXPECT_EQ(BitDifferences(g[3], c[3]), 0) << "cast";
  EXPECT_EQ(BitDifferences(g[4], c[4]), 0) << "aliased add";
}

// a and out start one element into their buffers, so they are not 16-byte
// aligned.
TEST_P(ElementwiseTest, MisalignedViewsAreBitExact) {
  const auto [da, db, dout, n] = GetParam();
  std::vector<HostTensor> t = {RandomTensor(da, Shape{n + 1}, 4, 4.f),
                               RandomTensor(db, Shape{n}, 5, 4.f), Poisoned(dout, Shape{n + 1}),
                               Poisoned(dout, Shape{n + 1})};
  auto [c, g] = Both(t, [n = n](Ops& ops, std::vector<TensorDesc>& d) {
    auto view = [n](const TensorDesc& whole) {
      return MakeTensor(static_cast<char*>(whole.data) + DTypeSize(whole.dtype), whole.dtype,
                        Shape{n});
    };
    absl::Status s = ops.Add(view(d[0]), d[1], view(d[2]), nullptr);
    if (s.ok()) s = ops.Cast(view(d[0]), view(d[3]), nullptr);
    return s;
  });
  EXPECT_EQ(BitDifferences(g[2], c[2]), 0) << "add";
  EXPECT_EQ(BitDifferences(g[3], c[3]), 0) << "cast";
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, ElementwiseTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(int64_t{1}, int64_t{13}, int64_t{1000}, int64_t{70001},
                                         int64_t{4096} * 1024, int64_t{0})));

}  // namespace
}  // namespace testing
}  // namespace tessera

// RMSNorm on the GPU against the CPU reference (needs a GPU, tag "gpu").
// Tolerances (relative L2): rstd and fp32 outputs 1e-5 (the same
// expressions, but the row's sum of squares in another order: ~1.5e-6 seen
// for H = 1024); bf16 outputs 1e-2 (one rounding); fp32 grad_x 1e-4;
// grad_weight 1e-4 (fp32 sums over rows in another order). Both branches of
// accumulate_grad_x are checked. (H = 1 is left out on purpose: there
// x * rstd is +-1 and grad_x is a cancellation to ~0, so no relative
// tolerance is meaningful.)
//
// Shapes cover both kernel paths: the register fast path (H a multiple of
// 8, at most 8192: 32, 64, 128 and 256 threads per row with one vector per
// thread, 256 threads with two and four) at realistic sizes, and the
// general path (H not a multiple of 8, H above 8192, unaligned rows).
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

// x dtype, weight dtype, out/grad dtype, accumulate_grad_x, {T, H}
using Param = std::tuple<DType, DType, DType, bool, std::pair<int, int>>;

class RmsNormTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(RmsNormTest, ForwardAndBackwardMatchCpu) {
  const auto [dx, dw, dout, accumulate, dims] = GetParam();
  const auto [tokens, h] = dims;
  const double out_tol = dout == DType::kBFloat16 ? 1e-2 : 1e-5;
  std::vector<HostTensor> t = {RandomTensor(dx, Shape{tokens, h}, 1, 2.f),
                               RandomTensor(dw, Shape{h}, 2),
                               Poisoned(dout, Shape{tokens, h}),
                               Poisoned(DType::kFloat32, Shape{tokens}),
                               RandomTensor(dout, Shape{tokens, h}, 3),        // grad_out
                               accumulate ? RandomTensor(dout, Shape{tokens, h}, 4)
                                          : Poisoned(dout, Shape{tokens, h}),  // grad_x
                               RandomTensor(DType::kFloat32, Shape{h}, 5)};    // grad_weight
  auto [c, g] = Both(t, [accumulate = accumulate](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.RmsNormForward(d[0], d[1], 1e-5f, d[2], d[3], nullptr);
    if (s.ok()) s = ops.RmsNormBackward(d[4], d[0], d[1], d[3], d[5], accumulate, d[6], nullptr);
    return s;
  });
  EXPECT_LT(Error(g[2], c[2]), out_tol) << "out";
  EXPECT_LT(Error(g[3], c[3]), 1e-5) << "rstd";
  EXPECT_LT(Error(g[5], c[5]), dout == DType::kBFloat16 ? 1e-2 : 1e-4) << "grad_x";
  EXPECT_LT(Error(g[6], c[6]), 1e-4) << "grad_weight";
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndShapes, RmsNormTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16), ::testing::Bool(),
                       ::testing::Values(std::pair{1, 3}, std::pair{37, 130},
                                         std::pair{256, 1024}, std::pair{0, 64},
                                         std::pair{100, 8}, std::pair{40, 264},
                                         std::pair{4096, 1024}, std::pair{24, 1536},
                                         std::pair{19, 2056}, std::pair{512, 4096},
                                         std::pair{33, 8192}, std::pair{5, 8200})));

// x and grad_out start 2 bytes past an aligned address, so no 16-byte
// vector fits a row: the general path runs.
TEST_F(CpuVsCudaTest, RmsNormUnalignedRowsMatchCpu) {
  constexpr int tokens = 64, h = 1024;
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens * h + 1}, 1, 2.f),
                               RandomTensor(DType::kBFloat16, Shape{h}, 2),
                               Poisoned(DType::kBFloat16, Shape{tokens, h}),
                               Poisoned(DType::kFloat32, Shape{tokens}),
                               RandomTensor(DType::kBFloat16, Shape{tokens * h + 1}, 3),
                               RandomTensor(DType::kFloat32, Shape{tokens, h}, 4),
                               RandomTensor(DType::kFloat32, Shape{h}, 5)};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    const TensorDesc x = MakeTensor(d[0].As<uint16_t>() + 1, DType::kBFloat16, Shape{tokens, h});
    const TensorDesc dy = MakeTensor(d[4].As<uint16_t>() + 1, DType::kBFloat16, Shape{tokens, h});
    absl::Status s = ops.RmsNormForward(x, d[1], 1e-5f, d[2], d[3], nullptr);
    if (s.ok()) s = ops.RmsNormBackward(dy, x, d[1], d[3], d[5], true, d[6], nullptr);
    return s;
  });
  EXPECT_LT(Error(g[2], c[2]), 1e-2) << "out";
  EXPECT_LT(Error(g[3], c[3]), 1e-5) << "rstd";
  EXPECT_LT(Error(g[5], c[5]), 1e-4) << "grad_x";
  EXPECT_LT(Error(g[6], c[6]), 1e-4) << "grad_weight";
}

// Same inputs, same bits: the row sums and the grad_weight partials run in
// a fixed order on both paths.
TEST_F(CpuVsCudaTest, RmsNormIsDeterministic) {
  for (int h : {1024, 130}) {
    SCOPED_TRACE(h);
    const int tokens = 4096;
    std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens, h}, 1, 2.f),
                                 RandomTensor(DType::kBFloat16, Shape{h}, 2),
                                 Poisoned(DType::kBFloat16, Shape{tokens, h}),
                                 Poisoned(DType::kFloat32, Shape{tokens}),
                                 RandomTensor(DType::kBFloat16, Shape{tokens, h}, 3),
                                 RandomTensor(DType::kFloat32, Shape{tokens, h}, 4),
                                 RandomTensor(DType::kFloat32, Shape{h}, 5)};
    const Body body = [](Ops& ops, std::vector<TensorDesc>& d) {
      absl::Status s = ops.RmsNormForward(d[0], d[1], 1e-5f, d[2], d[3], nullptr);
      if (s.ok()) s = ops.RmsNormBackward(d[4], d[0], d[1], d[3], d[5], true, d[6], nullptr);
      return s;
    };
    auto first = RunOn(gpu(), t, body);
    auto second = RunOn(gpu(), t, body);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    for (int i : {2, 3, 5, 6}) EXPECT_EQ(BitDifferences((*second)[i], (*first)[i]), 0) << i;
  }
}

}  // namespace
}  // namespace testing
}  // namespace tessera

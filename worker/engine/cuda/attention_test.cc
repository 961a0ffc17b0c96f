// Causal attention on the GPU against the CPU reference (needs a GPU, tag
// "gpu"). Tolerances (relative L2): lse 1e-5 (fp32, online softmax and
// another summation order); out 1e-2 (bf16); grad_qkv 2e-2 (bf16 result of
// a longer fp32 chain summed in another order). Shapes cover S = 1, S not a
// multiple of the 32-row tile, several tiles, head dims that are not
// multiples of 32 and the largest supported (256), and an empty batch.
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int>;  // B, S, nh, hd

class AttentionTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [b, s, nh, hd] = GetParam();
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{b, s, 3, nh, hd}, s + 1, 2.f),
                               Poisoned(DType::kBFloat16, Shape{b, s, nh, hd}),
                               Poisoned(DType::kFloat32, Shape{b, nh, s}),
                               RandomTensor(DType::kBFloat16, Shape{b, s, nh, hd}, s + 2),
                               Poisoned(DType::kBFloat16, Shape{b, s, 3, nh, hd})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.AttentionForward(d[0], d[1], d[2], nullptr);
    if (st.ok()) st = ops.AttentionBackward(d[3], d[0], d[1], d[2], d[4], nullptr);
    return st;
  });
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "out";
  EXPECT_LT(Error(g[2], c[2]), 1e-5) << "lse";
  EXPECT_LT(Error(g[4], c[4]), 2e-2) << "grad_qkv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Param{1, 1, 1, 16}, Param{2, 33, 3, 32},
                                           Param{1, 128, 2, 64}, Param{2, 257, 1, 128},
                                           Param{1, 70, 2, 96}, Param{1, 65, 1, 256},
                                           Param{1, 1000, 1, 64}, Param{3, 5, 2, 6},
                                           Param{0, 8, 2, 16}));

TEST_F(CpuVsCudaTest, AttentionRejectsHeadDimAbove256) {
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{1, 2, 3, 1, 264}, 1),
                               Poisoned(DType::kBFloat16, Shape{1, 2, 1, 264}),
                               Poisoned(DType::kFloat32, Shape{1, 1, 2})};
  auto g = RunOn(gpu(), t, [](Ops& ops, std::vector<TensorDesc>& d) {
    return ops.AttentionForward(d[0], d[1], d[2], nullptr);
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
}

}  // namespace
}  // namespace testing
}  // namespace tessera

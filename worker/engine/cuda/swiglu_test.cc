// SwiGLU on the GPU against the CPU reference (needs a GPU, tag "gpu").
// Tolerance: 1e-2 relative L2 on the bf16 results (fp32 math with expf's
// last bits, then one rounding), and no NaN for large negative gates.
// F a multiple of 8 takes the vectorized fast path (including more rows
// than one grid of it covers); F = 1, F = 100 and a misaligned gate_up take
// the general kernels.
#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::pair<int, int>;  // T, F

class SwiGluTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(SwiGluTest, ForwardAndBackwardMatchCpu) {
  const auto [tokens, f] = GetParam();
  std::vector<float> gate_up = RandomFloats(int64_t{tokens} * 2 * f, 1, 6.f);
  if (!gate_up.empty()) gate_up[0] = -120.f;  // expf(120) = inf: silu = -0, no NaN
  std::vector<HostTensor> t = {
      HostTensor::FromVector(DType::kBFloat16, Shape{tokens, 2 * f}, ToBf16(gate_up)),
      Poisoned(DType::kBFloat16, Shape{tokens, f}), RandomTensor(DType::kBFloat16, Shape{tokens, f}, 2),
      Poisoned(DType::kBFloat16, Shape{tokens, 2 * f})};
  auto [c, g] = Both(t, [](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status s = ops.SwiGluForward(d[0], d[1], nullptr);
    if (s.ok()) s = ops.SwiGluBackward(d[2], d[0], d[3], nullptr);
    return s;
  });
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "forward";
  EXPECT_LT(Error(g[3], c[3]), 1e-2) << "backward";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwiGluTest,
                         ::testing::Values(Param{1, 1}, Param{37, 96}, Param{512, 1376},
                                           Param{0, 8},
                                           // The training FFN width.
                                           Param{4096, 2816}, Param{33, 100}, Param{5, 8},
                                           // > 65535 blocks of 8 rows: the row loop wraps.
                                           Param{524300, 8}));

// gate_up one element into its buffer: not 16-byte aligned, so both
// directions run the general kernels at a width the fast path would take.
TEST_F(CpuVsCudaTest, SwiGluOnMisalignedGateUpMatchesCpu) {
  const int64_t tokens = 64, f = 256;
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, Shape{tokens * 2 * f + 1}, 1, 6.f),
                               Poisoned(DType::kBFloat16, Shape{tokens, f}),
                               RandomTensor(DType::kBFloat16, Shape{tokens, f}, 2),
                               Poisoned(DType::kBFloat16, Shape{tokens, 2 * f})};
  auto [c, g] = Both(t, [&](Ops& ops, std::vector<TensorDesc>& d) {
    const TensorDesc gate_up =
        MakeTensor(d[0].As<uint16_t>() + 1, DType::kBFloat16, Shape{tokens, 2 * f});
    absl::Status s = ops.SwiGluForward(gate_up, d[1], nullptr);
    if (s.ok()) s = ops.SwiGluBackward(d[2], gate_up, d[3], nullptr);
    return s;
  });
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "forward";
  EXPECT_LT(Error(g[3], c[3]), 1e-2) << "backward";
}

}  // namespace
}  // namespace testing
}  // namespace tessera

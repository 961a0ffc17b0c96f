// RoPE on the GPU against the CPU reference (needs a GPU, tag "gpu").
// Tolerance: 1e-2 relative L2 for the bf16 results (one rounding after fp32
// math whose sinf/cosf/powf may differ in the last bits), and the v part
// must come back bit-identical. Backward must undo forward to bf16 noise.
#include <algorithm>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {
namespace {

using Param = std::tuple<int, int, int, int, float>;  // B, S, nh, hd, theta

class RopeTest : public CpuVsCudaTest, public ::testing::WithParamInterface<Param> {};

TEST_P(RopeTest, ForwardAndBackwardMatchCpu) {
  const auto [b, s, nh, hd, theta] = GetParam();
  const Shape shape{b, s, 3, nh, hd};
  std::vector<HostTensor> t = {RandomTensor(DType::kBFloat16, shape, 1, 2.f),
                               RandomTensor(DType::kBFloat16, shape, 2, 2.f)};
  auto [c, g] = Both(t, [theta = theta](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.RopeForward(d[0], theta, nullptr);
    if (st.ok()) st = ops.RopeBackward(d[1], theta, nullptr);
    return st;
  });
  EXPECT_LT(Error(g[0], c[0]), 1e-2) << "forward";
  EXPECT_LT(Error(g[1], c[1]), 1e-2) << "backward";
  // v (part 2 of every token) is untouched.
  const size_t row = static_cast<size_t>(nh) * hd * 2;
  for (int64_t token = 0; token < int64_t{b} * s; ++token) {
    const size_t v_begin = (token * 3 + 2) * row;
    ASSERT_TRUE(std::equal(g[0].bytes.begin() + v_begin, g[0].bytes.begin() + v_begin + row,
                           t[0].bytes.begin() + v_begin))
        << "token " << token;
  }
  // Backward of forward is the identity (up to two bf16 roundings).
  auto round_trip = RunOn(gpu(), {t[0]}, [theta = theta](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.RopeForward(d[0], theta, nullptr);
    if (st.ok()) st = ops.RopeBackward(d[0], theta, nullptr);
    return st;
  });
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_LT(Error((*round_trip)[0], t[0]), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Values(Param{1, 1, 1, 2, 10000.f}, Param{2, 37, 3, 64, 10000.f},
                                           Param{1, 300, 2, 128, 500000.f},
                                           Param{3, 5, 4, 6, 10.f}, Param{0, 4, 2, 8, 10000.f}));

}  // namespace
}  // namespace testing
}  // namespace tessera
